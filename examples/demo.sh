#!/usr/bin/env bash
# The demo `make demo` runs: builds gvx's default image (busybox, from
# Debian's busybox-static), converts it into the image cache, and runs an
# episode in a sandbox — from the CLI, the Go SDK and Python.
# It expects `make all`'s outputs in build/.
set -euo pipefail
cd "$(dirname "$0")/.."
rungv=build/rungv
: "${GVX_CACHE:=$HOME/.cache/gvx}"
export GVX_CACHE
for f in "$rungv" build/libgvx.so; do
	[ -e "$f" ] || { echo "demo: $f is missing; run 'make demo' (or 'make all' first)" >&2; exit 1; }
done
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

echo
echo "== an episode from Python (examples/quickstart.py: a Sandbox, then a GvxEnv)"
PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" GVX_LIBRARY="$PWD/build/libgvx.so" GVX_RUNGV="$PWD/$rungv" \
	"${PYTHON:-python3}" examples/quickstart.py "$ref"
