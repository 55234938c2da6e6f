#!/usr/bin/env bash
# The demo `make demo` runs: builds gvx's default image (busybox, from
# Debian's busybox-static) and converts it into the image cache.
set -euo pipefail
cd "$(dirname "$0")/.."
rungv=build/rungv
image_dir="$GVX_CACHE/default-image"

echo "== building the default image (OCI layout) in $image_dir"
ref=$(go run ./core/internal/testimage/mkimage -default "$image_dir")

echo "== rungv pull $ref"
"$rungv" pull "$ref"

echo "== rungv images"
"$rungv" images
