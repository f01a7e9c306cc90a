# clickhouse-user.sh, sourced by the entry points of the ClickHouse
# stand-ins (txsink-test/clickhouse, txsink-test/clickhouse26).

# xml_escape prints $1 with &, < and > escaped for XML text.
xml_escape() {
	local s=$1
	s=${s//&/&amp;}
	s=${s//</&lt;}
	s=${s//>/&gt;}
	printf '%s' "$s"
}

# write_docker_user ROOT FILE [ACCESS_MANAGEMENT] does what the official
# clickhouse/clickhouse-server image does with CLICKHOUSE_USER and
# CLICKHOUSE_PASSWORD: when either is set, FILE (a users.d file) makes that
# user a network user with that password and, when it is not "default",
# narrows the built-in "default" user to loopback; otherwise FILE is
# removed. ROOT is the configuration's root element (yandex on 18.16,
# clickhouse on current servers). ACCESS_MANAGEMENT, when given, is the
# user's access_management (servers that have it: 20.x and later).
write_docker_user() {
	local root=$1 file=$2 access=${3-} user password
	if [[ $CLICKHOUSE_USER == default && -z $CLICKHOUSE_PASSWORD ]]; then
		rm -f "$file"
		return
	fi
	user=$(xml_escape "$CLICKHOUSE_USER")
	password=$(xml_escape "$CLICKHOUSE_PASSWORD")
	{
		echo "<${root}><users>"
		if [[ $CLICKHOUSE_USER != default ]]; then
			echo '<default><networks replace="replace"><ip>::1</ip><ip>127.0.0.1</ip></networks></default>'
		fi
		echo "<${user}>"
		echo "<password>${password}</password>"
		echo '<networks replace="replace"><ip>::/0</ip></networks>'
		echo '<profile>default</profile><quota>default</quota>'
		if [[ -n $access ]]; then
			echo "<access_management>${access}</access_management>"
		fi
		echo "</${user}>"
		echo "</users></${root}>"
	} >"$file"
}
