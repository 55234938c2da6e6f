#!/bin/bash
# The clean room's side of run.sh: runs inside the debootstrapped Debian
# container (python3 and python3-venv only, --network none, uid 1000) with
# the wheel at /wheels and this directory at /cleanroom, both read-only.
#
# Exit status: 0 the wheel installed and worked; 3 pip refused a wheel that
# says it does not fit this system, with a clear message (an honest
# refusal); anything else a failure.
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }

shopt -s nullglob
wheels=(/wheels/gvx-*.whl)
[ ${#wheels[@]} = 1 ] || fail "want one gvx-*.whl in /wheels, found: ${wheels[*]:-none}"
whl=${wheels[0]}
echo "$(. /etc/os-release && echo "$PRETTY_NAME"), $(python3 --version), $(getconf GNU_LIBC_VERSION), uid $(id -u)"

# The room holds Python and nothing gvx might lean on.
for tool in go gcc busybox e2fsck mkfs.ext4 debugfs mke2fs mkfs.erofs fsck.erofs igzip docker runsc; do
	! command -v "$tool" >/dev/null || fail "the clean room has $tool ($(command -v "$tool")): its recipe in run.sh must leave it out"
done
# And this process is as confined as run.sh asked: unprivileged, no
# capabilities, no new privileges, under docker's default seccomp filter.
grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr '\n' ' '; echo
grep -q '^Seccomp:[[:space:]]*2' /proc/self/status || fail "no seccomp filter in force: run.sh must keep docker's default profile"
grep -q '^CapEff:[[:space:]]*0*$' /proc/self/status || fail "the clean room holds capabilities"

claim=$(python3 /cleanroom/claims.py "$whl")
echo "$(basename "$whl") claims to fit here: $claim"

cd "$HOME"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
python3 -m venv venv
if ! venv/bin/pip install --no-index "$whl" >pip.log 2>&1; then
	cat pip.log
	[ "$claim" != yes ] || fail "pip refused a wheel whose tags and Requires-Python say it fits this system"
	# pip's own words for the two honest refusals.
	grep -qE "is not a supported wheel on this platform|requires a different Python" pip.log ||
		fail "pip refused the wheel without saying it is the wrong platform or Python"
	echo "REFUSED, as the wheel says it must be: ${claim#no: }"
	# When only the platform excludes this system, its Python is still one
	# Requires-Python admits: the package must at least import on it (libgvx
	# loads at the first call, not at import).
	if [ "$(python3 /cleanroom/claims.py --python "$whl")" = yes ]; then
		mkdir unpacked && python3 -m zipfile -e "$whl" unpacked
		(cd / && PYTHONPATH=$HOME/unpacked python3 -c 'import gvx, gvx.env, gvx.aio, gvx.docker, gvx.golden, gvx.images, gvx.volumes') ||
			fail "gvx does not import on $(python3 --version), which its Requires-Python admits"
		echo "$(python3 --version) imports gvx, as Requires-Python says it can"
	fi
	exit 3
fi
tail -n 1 pip.log
[ "$claim" = yes ] || fail "pip installed a wheel that says it does not fit (${claim#no: })"

venv/bin/python /cleanroom/episode.py ||
	fail "pip installed the wheel, whose tags and Requires-Python say it fits $(getconf GNU_LIBC_VERSION) and $(python3 --version), but it does not work here"

# rungv as a pip user has it: the console script when the wheel has one,
# else the binary inside the package.
if [ -x venv/bin/rungv ]; then
	rungv=venv/bin/rungv
else
	rungv=$(venv/bin/python -c 'import gvx; print(gvx.rungv_path())')
	echo "note: the wheel has no rungv console script; running $rungv"
fi
image=$(venv/bin/python -c 'import gvx; print(gvx.default_image())')
out=$("$rungv" run -q "$image" sh -c 'echo rungv ok; id -u')
[ "$out" = $'rungv ok\n0' ] || fail "rungv run printed: $out"
echo "rungv run: ok"
