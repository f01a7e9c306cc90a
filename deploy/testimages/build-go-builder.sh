#!/usr/bin/env bash
# build-go-builder.sh builds, without any image registry, a local stand-in for
# the official golang image that deploy/Dockerfile's build stage uses:
#
#   txsink-test/go-builder:<hash>   the stand-in base image (build.sh) + this
#                                   machine's Go toolchain (go env GOROOT) + a
#                                   read-only module proxy holding exactly the
#                                   modules of go.mod (GOPROXY=file://…)
#
# so that `docker build --build-arg GO_IMAGE=<it> -f deploy/Dockerfile .` needs
# no network inside the build. The modules come from this machine's module
# cache; modules missing there are first downloaded with the machine's own
# Go settings (go env GOPROXY), as `go build` would.
#
# The tag is a hash of the base image, the Go version, go.mod, go.sum and this
# script, so an existing image is reused. stdout gets only the line
#
#   export TXSINK_TEST_GO_IMAGE=txsink-test/go-builder:<hash>
#
# Progress goes to stderr. The base image comes from TXSINK_TEST_BASE_IMAGE,
# else from build.sh (which builds it if it is missing).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

log() { printf '[go-builder] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v go >/dev/null || die "go is not installed"
command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "no Docker engine answers (is dockerd running?)"

base=${TXSINK_TEST_BASE_IMAGE-}
if [[ -z $base ]]; then
	base=$(bash "$here/build.sh" --print-env | sed -n 's/^export TXSINK_TEST_BASE_IMAGE=//p')
	[[ -n $base ]] || die "build.sh --print-env names no base image"
fi
if ! docker image inspect "$base" >/dev/null 2>&1; then
	log "$base is missing: running build.sh"
	bash "$here/build.sh" >/dev/null
fi
docker image inspect "$base" >/dev/null 2>&1 || die "base image $base is missing"

goroot=$(go env GOROOT)
gover=$(go env GOVERSION)
tag=$({
	printf '%s\n%s\n' "$base" "$gover"
	cat "$repo/go.mod" "$repo/go.sum" "${BASH_SOURCE[0]}"
} | sha256sum | cut -c1-12)
image=txsink-test/go-builder:$tag

if docker image inspect "$image" >/dev/null 2>&1; then
	log "$image exists"
	printf 'export TXSINK_TEST_GO_IMAGE=%s\n' "$image"
	exit 0
fi

start=$SECONDS
ctx=$(mktemp -d "${TMPDIR:-/var/tmp}/txsink-gobuilder.XXXXXX")
trap 'chmod -R u+w "$ctx" 2>/dev/null; rm -rf "$ctx"' EXIT

# Every module of go.mod into the machine's module cache (a no-op when they
# are there), then copied from that cache, used as a file proxy, into a
# private cache whose download directory becomes the image's proxy.
log "collecting the modules of go.mod"
(cd "$repo" && go mod download) >&2
hostcache=$(go env GOMODCACHE)
(cd "$repo" && GOMODCACHE="$ctx/modcache" GOPROXY="file://$hostcache/cache/download" \
	GOSUMDB=off GOFLAGS=-mod=mod go mod download) >&2
mv "$ctx/modcache/cache/download" "$ctx/goproxy"
chmod -R u+w "$ctx/modcache"
rm -rf "$ctx/modcache"
find "$ctx/goproxy" -name '*.lock' -delete

log "copying the Go toolchain $gover from $goroot"
mkdir "$ctx/go"
tar -C "$goroot" --exclude=./test --exclude=./doc --exclude=./api -c . | tar -C "$ctx/go" -x

# A build cache to start from (TXSINK_TEST_GO_BUILD_CACHE): a GOCACHE in
# which this machine built cmd/txsink as the Dockerfile's build stage does
# (CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath), so that the
# stage compiles only what changed since instead of the standard library
# and every module again. -trimpath keeps directories out of the cache
# keys, so the host's entries are the container's.
mkdir "$ctx/gocache"
if [[ -n ${TXSINK_TEST_GO_BUILD_CACHE-} && -d $TXSINK_TEST_GO_BUILD_CACHE ]]; then
	log "seeding the build cache from $TXSINK_TEST_GO_BUILD_CACHE"
	cp -a "$TXSINK_TEST_GO_BUILD_CACHE"/. "$ctx/gocache/"
fi

cat >"$ctx/Dockerfile" <<'DOCKERFILE'
ARG BASE
FROM ${BASE}
# Inherited by the build stages made FROM this image, so that a test can
# prune them (the legacy builder leaves a multi-stage build's stages as
# dangling images): docker image prune --filter label=io.txsink.go-builder
LABEL io.txsink.go-builder=1
COPY go /usr/local/go
COPY goproxy /opt/goproxy
COPY gocache /root/.cache/go-build
ENV GOPATH=/go \
    PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    GOPROXY=file:///opt/goproxy \
    GOSUMDB=off \
    GOTOOLCHAIN=local
RUN go version
DOCKERFILE

log "building $image"
if ! DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$base" -t "$image" "$ctx" >/dev/null 2>"$ctx.log"; then
	cat "$ctx.log" >&2
	rm -f "$ctx.log"
	die "docker build of $image failed"
fi
rm -f "$ctx.log"
log "built $image in $((SECONDS - start))s"
# Older builders (other go.mod, Go version or base) are not needed any more.
for old in $(docker image ls --format '{{.Repository}}:{{.Tag}}' txsink-test/go-builder); do
	if [[ $old != "$image" ]]; then
		docker rmi "$old" >/dev/null 2>&1 || true
	fi
done
printf 'export TXSINK_TEST_GO_IMAGE=%s\n' "$image"
