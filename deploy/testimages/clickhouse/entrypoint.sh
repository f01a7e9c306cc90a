#!/usr/bin/env bash
# Entry point of txsink-test/clickhouse, following the official
# clickhouse/clickhouse-server image: CLICKHOUSE_USER/CLICKHOUSE_PASSWORD make
# a network user in users.d (the built-in "default" user then answers only on
# loopback), CLICKHOUSE_DB is created and /docker-entrypoint-initdb.d is run
# once the server answers. Arguments starting with "--" go to the server.
set -euo pipefail

: "${CLICKHOUSE_USER:=default}"
: "${CLICKHOUSE_PASSWORD:=}"
: "${CLICKHOUSE_DB:=}"

if [[ $# -gt 0 && ${1:0:2} != -- ]]; then
	exec "$@"
fi

# shellcheck source=../shared/clickhouse-user.sh
. /usr/local/lib/txsink/clickhouse-user.sh

mkdir -p /var/lib/clickhouse /var/log/clickhouse-server
chown -R clickhouse:clickhouse /var/lib/clickhouse /var/log/clickhouse-server

write_docker_user yandex /etc/clickhouse-server/users.d/docker-user.xml

setpriv --reuid=clickhouse --regid=clickhouse --init-groups \
	clickhouse-server --config-file=/etc/clickhouse-server/config.xml "$@" &
server=$!
trap 'kill -TERM "$server" 2>/dev/null' TERM INT

client=(clickhouse-client --host 127.0.0.1 --user "$CLICKHOUSE_USER" --password "$CLICKHOUSE_PASSWORD")
if [[ -n $CLICKHOUSE_DB ]] || compgen -G '/docker-entrypoint-initdb.d/*' >/dev/null; then
	for _ in $(seq 1 300); do
		if "${client[@]}" --query 'SELECT 1' >/dev/null 2>&1; then
			break
		fi
		kill -0 "$server" 2>/dev/null || break
		sleep 0.2
	done
	if [[ -n $CLICKHOUSE_DB ]]; then
		"${client[@]}" --query "CREATE DATABASE IF NOT EXISTS \`${CLICKHOUSE_DB}\`"
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sh) echo "running $f"; . "$f" ;;
		*.sql) echo "running $f"; "${client[@]}" --multiquery <"$f" ;;
		*) [[ -e $f ]] && echo "ignoring $f" ;;
		esac
	done
fi

# Wait for the server; a TERM or INT interrupts the first wait, forwards the
# signal, and the second wait collects the exit status.
status=0
wait "$server" || status=$?
if kill -0 "$server" 2>/dev/null; then
	status=0
	wait "$server" || status=$?
fi
exit "$status"
