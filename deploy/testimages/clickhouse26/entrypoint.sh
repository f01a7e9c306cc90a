#!/usr/bin/env bash
# Entry point of txsink-test/clickhouse26, following the official
# clickhouse/clickhouse-server image: CLICKHOUSE_USER/CLICKHOUSE_PASSWORD make
# a network user in users.d (the built-in "default" user then answers only on
# loopback), CLICKHOUSE_DEFAULT_ACCESS_MANAGEMENT=1 gives that user access
# management, CLICKHOUSE_DB is created and /docker-entrypoint-initdb.d/*.sql
# run on the first start (empty data directory). The server is ClickHouse
# 26's engine from the chdb-core wheel, served by server.py.
set -euo pipefail

: "${CLICKHOUSE_USER:=default}"
: "${CLICKHOUSE_PASSWORD:=}"
: "${CLICKHOUSE_DB:=}"
: "${CLICKHOUSE_DEFAULT_ACCESS_MANAGEMENT:=0}"
export CLICKHOUSE_USER CLICKHOUSE_PASSWORD

if [[ $# -gt 0 && ${1:0:2} != -- ]]; then
	exec "$@"
fi
if [[ $# -gt 0 ]]; then
	echo "clickhouse26: server arguments are not supported (put settings in config.d/): $*" >&2
	exit 2
fi

# shellcheck source=../shared/clickhouse-user.sh
. /usr/local/lib/txsink/clickhouse-user.sh

data=/var/lib/clickhouse
mkdir -p "$data" /etc/clickhouse-server/users.d
chown -R clickhouse:clickhouse "$data"

write_docker_user clickhouse /etc/clickhouse-server/users.d/docker-user.xml "$CLICKHOUSE_DEFAULT_ACCESS_MANAGEMENT"

# First start only, as the official image: create CLICKHOUSE_DB and run the
# *.sql init scripts before the listeners open.
init=""
if [[ ! -e $data/.txsink-initialised ]]; then
	init=$(mktemp)
	if [[ -n $CLICKHOUSE_DB ]]; then
		printf 'CREATE DATABASE IF NOT EXISTS `%s`;\n' "${CLICKHOUSE_DB//\`/}" >>"$init"
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sql) echo "running $f"; { cat "$f"; echo; } >>"$init" ;;
		*) [[ -e $f ]] && echo "ignoring $f (only *.sql init scripts are supported)" ;;
		esac
	done
	chmod 0644 "$init"
	touch "$data/.txsink-initialised"
	chown clickhouse:clickhouse "$data/.txsink-initialised"
fi
export CLICKHOUSE26_INIT_SQL=$init

# server.py takes SIGTERM/SIGINT itself (it kills its keep-alive query so
# the engine shuts down cleanly), so it replaces this shell.
exec setpriv --reuid=clickhouse --regid=clickhouse --init-groups \
	python3 /usr/local/lib/clickhouse26/server.py
