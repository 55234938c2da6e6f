#!/usr/bin/env bash
# Builds gvx's wheel as `python -m build` does, for make test-wheel: an sdist,
# then the wheel from that sdist in pip's isolated build environment (setuptools
# and zig as pyproject.toml pins them), twice:
#
#   OUT/gvx-*.tar.gz        the sdist
#   OUT/gvx-*.whl           the wheel, built from the sdist unpacked in OUT/src-1
#                           with TMPDIR=OUT/tmp-1 and, as root, on a host of its
#                           own name (HOSTNAME_MARK, written to OUT/hostname)
#   OUT/again/gvx-*.whl     the same, from OUT/src-2 with TMPDIR=OUT/tmp-2
#
# python/tests/test_wheel.py then checks that the two wheels match byte for
# byte and that neither those directories nor that host name are inside.
# The second build finds Go's build cache warm (same inputs, so the same
# compiled packages), so it costs the links, the image and the zip, not a
# compile: seconds, not minutes.
set -euo pipefail
python=$1 out=$2
HOSTNAME_MARK=${HOSTNAME_MARK:-gvx-wheel-build-host}
# The sdist with the caller's setuptools (pinned the same): making it compiles nothing.
"$python" -m build -q --sdist --no-isolation --skip-dependency-check -o "$out" . >/dev/null
sdist=$(ls "$out"/gvx-*.tar.gz)
for i in 1 2; do
	mkdir -p "$out/src-$i" "$out/tmp-$i"
	tar -xzf "$sdist" -C "$out/src-$i" --strip-components=1
done

build() { # N OUTDIR
	TMPDIR=$out/tmp-$1 "$python" -m build -q --wheel -o "$2" "$out/src-$1" >"$out/build-$1.log" 2>&1 ||
		{ cat "$out/build-$1.log" >&2; echo "building the wheel failed: $out/build-$1.log" >&2; return 1; }
}
if [ "$(id -u)" = 0 ] && unshare --uts true 2>/dev/null; then
	# A UTS namespace of its own: the build sees HOSTNAME_MARK as the host name.
	export -f build; export python out
	unshare --uts bash -c 'hostname "$0" && build 1 "$1"' "$HOSTNAME_MARK" "$out"
	echo "$HOSTNAME_MARK" > "$out/hostname"
else
	build 1 "$out"
	hostname > "$out/hostname"
fi
build 2 "$out/again"
