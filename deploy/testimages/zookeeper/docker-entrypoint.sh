#!/usr/bin/env bash
# Entry point of txsink-test/zookeeper, following the official zookeeper
# image: as root it fixes the data directories' owner and re-runs itself as the
# zookeeper user; it writes $ZOO_CONF_DIR/zoo.cfg from ZOO_* variables when
# none exists, writes $ZOO_DATA_DIR/myid, then runs the command.
set -euo pipefail

if [[ $1 == zkServer.sh && $(id -u) == 0 ]]; then
	chown -R zookeeper:zookeeper "$ZOO_DATA_DIR" "$ZOO_DATA_LOG_DIR" "$ZOO_LOG_DIR" "$ZOO_CONF_DIR"
	exec setpriv --reuid=zookeeper --regid=zookeeper --init-groups "${BASH_SOURCE[0]}" "$@"
fi

cfg=$ZOO_CONF_DIR/zoo.cfg
if [[ ! -f $cfg ]]; then
	{
		echo "dataDir=$ZOO_DATA_DIR"
		echo "dataLogDir=$ZOO_DATA_LOG_DIR"
		echo "tickTime=${ZOO_TICK_TIME:-2000}"
		echo "initLimit=${ZOO_INIT_LIMIT:-5}"
		echo "syncLimit=${ZOO_SYNC_LIMIT:-2}"
		echo "autopurge.snapRetainCount=${ZOO_AUTOPURGE_SNAPRETAINCOUNT:-3}"
		echo "autopurge.purgeInterval=${ZOO_AUTOPURGE_PURGEINTERVAL:-0}"
		echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-60}"
		echo "standaloneEnabled=${ZOO_STANDALONE_ENABLED:-true}"
		# Debian's ZooKeeper lacks the AdminServer's Jetty wiring.
		echo "admin.enableServer=false"
		if [[ -z ${ZOO_SERVERS-} ]]; then
			ZOO_SERVERS="server.${ZOO_MY_ID:-1}=localhost:2888:3888;2181"
		fi
		for server in $ZOO_SERVERS; do
			echo "$server"
		done
		echo "4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr}"
		for cfg_extra_entry in ${ZOO_CFG_EXTRA-}; do
			echo "$cfg_extra_entry"
		done
	} >"$cfg"
fi
[[ -f $ZOO_CONF_DIR/log4j.properties ]] || cp /etc/txsink-zookeeper/log4j.properties "$ZOO_CONF_DIR/"
[[ -f $ZOO_DATA_DIR/myid ]] || echo "${ZOO_MY_ID:-1}" >"$ZOO_DATA_DIR/myid"

exec "$@"
