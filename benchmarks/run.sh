#!/usr/bin/env bash
# Runs gvx's benchmarks; `make bench` calls it after building.
# Speed and memory targets live here, never as timed assertions in tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bench="${GVX_CACHE:-$HOME/.cache/gvx}/bench"
mkdir -p "$bench"

# A ~500 MB Debian root filesystem, made once with debootstrap from Debian's
# package archive.
rootfs="$bench/debian-rootfs"
if [ ! -d "$rootfs" ]; then
	command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap
	echo "debootstrapping a Debian rootfs into $rootfs (once) …"
	rm -rf "$rootfs.tmp"
	debootstrap --variant=minbase --include=python3,python3-pip,perl,gcc,g++,make,git,curl \
		bookworm "$rootfs.tmp" http://deb.debian.org/debian >"$bench/debootstrap.log"
	mv "$rootfs.tmp" "$rootfs"
fi

echo "== OCI image → EROFS conversion"
go run ./benchmarks/erofsconvert -rootfs "$rootfs" -work "$bench" -rungv build/rungv -runs "${RUNS:-5}"
