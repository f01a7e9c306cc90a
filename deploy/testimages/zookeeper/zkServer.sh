#!/usr/bin/env bash
# zkServer.sh for txsink-test/zookeeper: only `start-foreground` (the official
# image's command) is supported; it runs Debian's ZooKeeper 3.8 in the
# foreground with $ZOO_CONF_DIR/zoo.cfg, logging to the console.
set -euo pipefail
if [[ ${1-} != start-foreground ]]; then
	echo "usage: zkServer.sh start-foreground" >&2
	exit 2
fi
exec java ${JVMFLAGS:--Xmx512m} \
	-Dzookeeper.log.dir="$ZOO_LOG_DIR" \
	-Dlog4j.configuration="file:$ZOO_CONF_DIR/log4j.properties" \
	-cp "$ZOO_CONF_DIR:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar" \
	org.apache.zookeeper.server.quorum.QuorumPeerMain "$ZOO_CONF_DIR/zoo.cfg"
