#!/usr/bin/env bash
# The demo `make demo` runs: builds gvx's default image (busybox, from
# Debian's busybox-static), converts it into the image cache, and runs an
# episode in a sandbox — from the CLI and from the Go SDK.
set -euo pipefail
cd "$(dirname "$0")/.."
rungv=build/rungv
image_dir="$GVX_CACHE/default-image"

echo "== building the default image (OCI layout) in $image_dir"
ref=$(go run ./core/internal/testimage/mkimage -default "$image_dir")

echo "== rungv pull $ref"
"$rungv" pull "$ref"
"$rungv" images

echo
echo "== rungv run: a command in a fresh sandbox (one unprivileged, self-locked process)"
"$rungv" run --memory 256m --pids-limit 128 "$ref" sh -c '
	echo "hello from $(hostname), kernel $(uname -r) (gVisor), uid $(id -u)"
	echo "processes visible inside:"; ps -o pid,comm
	rm -rf /bin/ls && echo "rm -rf /bin/ls worked inside; the image is untouched"'
"$rungv" run "$ref" sh -c 'test -e /bin/ls && echo "next sandbox: /bin/ls is back"'

echo
echo "== an episode with the Go SDK (examples/go)"
GVX_RUNGV="$PWD/$rungv" go run ./examples/go "$ref"
