#!/usr/bin/env bash
# Entry point of txsink-test/postgres, following the official postgres image:
# on an empty $PGDATA it runs initdb as POSTGRES_USER with POSTGRES_PASSWORD,
# allows password logins from any address, creates POSTGRES_DB, runs
# /docker-entrypoint-initdb.d/*.sh|*.sql; then it runs the command as the
# postgres user. A command starting with "-" gets "postgres" put in front.
set -Eeuo pipefail

if [[ ${1:0:1} == - ]]; then
	set -- postgres "$@"
fi

if [[ $1 == postgres && $(id -u) == 0 ]]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chown -R postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 0700 "$PGDATA"
	exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

if [[ $1 == postgres && ! -s $PGDATA/PG_VERSION ]]; then
	: "${POSTGRES_USER:=postgres}"
	: "${POSTGRES_DB:=$POSTGRES_USER}"
	: "${POSTGRES_HOST_AUTH_METHOD:=}"
	if [[ -z ${POSTGRES_PASSWORD-} && $POSTGRES_HOST_AUTH_METHOD != trust ]]; then
		echo >&2 'Error: Database is uninitialized and superuser password is not specified.'
		echo >&2 '       Set POSTGRES_PASSWORD, or POSTGRES_HOST_AUTH_METHOD=trust.'
		exit 1
	fi
	# shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a word list, as in the official image.
	if [[ -n ${POSTGRES_PASSWORD-} ]]; then
		initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") ${POSTGRES_INITDB_ARGS-} -D "$PGDATA"
	else
		initdb --username="$POSTGRES_USER" ${POSTGRES_INITDB_ARGS-} -D "$PGDATA"
	fi
	echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
	auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
	printf '\nhost all all all %s\n' "$auth" >>"$PGDATA/pg_hba.conf"

	# A temporary server reachable only through the Unix socket, as upstream.
	pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
	export PGPASSWORD=${POSTGRES_PASSWORD-}
	psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname postgres)
	if [[ $POSTGRES_DB != postgres ]]; then
		"${psql[@]}" --set db="$POSTGRES_DB" <<-'SQL'
			CREATE DATABASE :"db" ;
		SQL
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sh) echo "running $f"; . "$f" ;;
		*.sql) echo "running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
		*) [[ -e $f ]] && echo "ignoring $f" ;;
		esac
	done
	unset PGPASSWORD
	pg_ctl -D "$PGDATA" -m fast -w stop
	echo 'PostgreSQL init process complete; ready for start up.'
fi

exec "$@"
