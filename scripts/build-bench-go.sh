#!/usr/bin/env bash
# Builds the Go benchmark driver (bench/go, go-liftbridge v2.3.0) into a cache
# folder for `make bench`. Rebuilds only when bench/go's files change.
#
#   scripts/build-bench-go.sh [DEST_DIR]     (default: .cache/bench-go)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
src="$root/bench/go"
dest="${1:-$root/.cache/bench-go}"
binary="$dest/liftbridge-bench-go"
stamp="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -d' ' -f1)"

if [ -x "$binary" ] && [ -f "$binary.source" ] && [ "$(cat "$binary.source")" = "$stamp" ]; then
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "build-bench-go: the Go toolchain ('go') is not on PATH; it builds the Go driver" >&2
  echo "  that make bench compares the SDK with. Install Go 1.21+ and retry." >&2
  exit 2
fi

mkdir -p "$dest"
export GOFLAGS="-mod=mod"
echo "build-bench-go: building $binary (go-liftbridge $(grep -o 'go-liftbridge/v2 v[0-9.]*' "$src/go.mod" | cut -d' ' -f2))"
(cd "$src" && go build -o "$binary.tmp" .)
mv "$binary.tmp" "$binary"
echo "$stamp" > "$binary.source"
