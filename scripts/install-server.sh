#!/usr/bin/env bash
# Builds the Liftbridge server (v1.9.0) and a standalone NATS server from their
# Go modules into a cache folder, once. A second run with both binaries present
# returns at once.
#
#   scripts/install-server.sh [DEST_DIR]     (default: .cache/servers)
#
# Why not `go install module@version`: that asks the module proxy for the
# module's version list, which some proxies refuse for this module; downloading
# the exact version and building inside its module directory needs only the
# version itself.
set -euo pipefail

LIFTBRIDGE_VERSION="v1.9.0"
NATS_VERSION="v2.10.22"
dest="${1:-$(cd "$(dirname "$0")/.." && pwd)/.cache/servers}"
bin="$dest/bin"

have() { [ -x "$bin/$1" ] && [ -f "$bin/$1.version" ] && [ "$(cat "$bin/$1.version")" = "$2" ]; }

if have liftbridge "$LIFTBRIDGE_VERSION" && have nats-server "$NATS_VERSION"; then
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "install-server: the Go toolchain ('go') is not on PATH; it is needed to build" >&2
  echo "  Liftbridge $LIFTBRIDGE_VERSION and nats-server $NATS_VERSION. Install Go 1.21+ and retry." >&2
  exit 2
fi

mkdir -p "$bin"
export GOFLAGS="-mod=mod"

build() { # build NAME MODULE VERSION
  local name="$1" module="$2" version="$3" dir
  have "$name" "$version" && return 0
  echo "install-server: building $name $version (first run only; takes a minute or two)"
  go mod download "$module@$version"
  dir="$(go env GOMODCACHE)/$module@$version"
  (cd "$dir" && go build -o "$bin/$name.tmp" .)
  mv "$bin/$name.tmp" "$bin/$name"
  echo "$version" > "$bin/$name.version"
}

build liftbridge github.com/liftbridge-io/liftbridge "$LIFTBRIDGE_VERSION"
build nats-server github.com/nats-io/nats-server/v2 "$NATS_VERSION"
echo "install-server: $bin/liftbridge and $bin/nats-server are ready"
