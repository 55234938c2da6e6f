#!/bin/bash
# The clean-room install test (issue 22): the wheel `make test-wheel` built,
# installed with `pip install --no-index` and used — a Sandbox exec, a volume,
# a GvxEnv episode and `rungv run` on the default image the wheel embeds —
# on a machine that has Python and nothing else.
#
# The machine is a minimal Debian debootstrapped here (minbase plus python3
# and python3-venv; no Go, busybox, e2fsprogs or compiler), imported into the
# host's docker and run as a container with --network none, as uid 1000,
# with --cap-drop ALL and no-new-privileges, under docker's default seccomp
# profile. That profile is enough, and no option widens it (no
# seccomp=unconfined, no added capability, no --privileged): gVisor's
# systrap platform installs seccomp filters on its own stub processes
# (seccomp(2), allowed) and attaches to them with ptrace(PTRACE_ATTACH),
# which the default profile allows on kernels from 4.8 and which Yama's
# ptrace_scope 0-1 allows for one's own children. A profile that denies
# ptrace fails every sandbox start with "initialize systrap: unable to
# attach: operation not permitted"; process_vm_readv/writev are not used.
#
# Each Debian release in GVX_CLEANROOM_SUITES (default: bookworm bullseye) is
# one case. bullseye has glibc 2.31 and Python 3.9: a wheel whose tags and
# Requires-Python claim that system must install and work there, and one that
# excludes it must be refused by pip with pip's clear message (claims.py
# decides which, from the wheel's name and metadata).
#
# The debootstrapped tree is cached as $GVX_CACHE/cleanroom/SUITE-KEY.tar.gz
# and imported as the docker image gvx.cleanroom/SUITE:KEY, KEY being a hash
# of the recipe below; building it needs root, debootstrap and the Debian
# mirror (GVX_DEBIAN_MIRROR). The test skips, saying why, only when there is
# no docker daemon.
#
# Usage: run.sh [WHEEL_DIR]   (default: build/wheel; holds one gvx-*.whl)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
wheel_dir=${1:-$root/build/wheel}
suites=${GVX_CLEANROOM_SUITES:-bookworm bullseye}
cache=${GVX_CACHE:-$HOME/.cache/gvx}/cleanroom
mirror=${GVX_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# The recipe: what debootstrap installs and leaves out. e2fsprogs is
# Priority: required, so minbase would bring it; gvx must not need it.
include=python3,python3-venv
exclude=e2fsprogs
recipe_version=1

ncases=$(wc -w <<<"$suites")
if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
	echo "SKIP clean-room install test: no docker daemon (make test starts a private one with CI=true or GVX_TEST_DOCKER=1)"
	echo "cleanroom: 0 passed, 0 failed, $ncases skipped"
	exit 0
fi

shopt -s nullglob
wheels=("$wheel_dir"/gvx-*.whl)
if [ ${#wheels[@]} != 1 ]; then
	echo "clean room: want one gvx-*.whl in $wheel_dir, found: ${wheels[*]:-none}; run make test-wheel first" >&2
	exit 1
fi
shopt -u nullglob

mkdir -p "$cache"

# image SUITE: prints the docker image of SUITE's clean room, building and
# importing it when missing.
image() {
	local suite=$1 key tag tarball tree start
	key=$(printf 'suite=%s variant=minbase include=%s exclude=%s user=1000 recipe=%s' \
		"$suite" "$include" "$exclude" "$recipe_version" | sha256sum | cut -c1-16)
	tag=gvx.cleanroom/$suite:$key
	tarball=$cache/$suite-$key.tar.gz
	if docker image inspect "$tag" >/dev/null 2>&1; then
		echo "$tag"
		return
	fi
	(
		flock 9
		if [ ! -s "$tarball" ]; then
			[ "$(id -u)" = 0 ] || { echo "building the $suite clean room runs debootstrap, which needs root: run as root once (it is cached in $cache)" >&2; exit 1; }
			command -v debootstrap >/dev/null || { echo "debootstrap is not installed: apt-get install debootstrap (make deps does)" >&2; exit 1; }
			start=$SECONDS
			tree=$(mktemp -d "$cache/tree.XXXXXX")
			trap 'rm -rf "$tree"' EXIT
			echo "debootstrapping Debian $suite (minbase, $include, without $exclude) from $mirror, once …" >&2
			if ! timeout 1200 debootstrap --variant=minbase --include="$include" --exclude="$exclude" \
				"$suite" "$tree/root" "$mirror" >"$tree.log" 2>&1; then
				tail -n 20 "$tree.log" >&2
				echo "debootstrap $suite failed (log $tree.log); does $mirror answer? set GVX_DEBIAN_MIRROR to another mirror" >&2
				exit 1
			fi
			# A user as a GPU node's would be: uid 1000 with a home.
			echo 'user:x:1000:1000::/home/user:/bin/bash' >>"$tree/root/etc/passwd"
			echo 'user:x:1000:' >>"$tree/root/etc/group"
			install -d -o 1000 -g 1000 "$tree/root/home/user"
			rm -rf "$tree/root"/var/cache/apt/*.bin "$tree/root"/var/cache/apt/archives/*.deb "$tree/root"/var/lib/apt/lists/*
			tar -C "$tree/root" --numeric-owner -czf "$tarball.tmp" .
			mv "$tarball.tmp" "$tarball"
			rm -f "$tree.log"
			echo "debootstrapped $suite in $((SECONDS - start)) s: $tarball ($(du -h "$tarball" | cut -f1))" >&2
		fi
		docker image inspect "$tag" >/dev/null 2>&1 || docker import "$tarball" "$tag" >/dev/null
	) 9>"$cache/.lock" || return 1
	echo "$tag"
}

# The wheel alone in a directory uid 1000 can read.
wheels_in=$(mktemp -d)
trap 'rm -rf "$wheels_in"' EXIT
cp "${wheels[0]}" "$wheels_in/"
chmod -R a+rX "$wheels_in"
echo "clean room: $(basename "${wheels[0]}") ($(du -h "${wheels[0]}" | cut -f1))"

passed=0 failed=0
for suite in $suites; do
	echo "--- clean room: Debian $suite"
	start=$SECONDS
	if ! tag=$(image "$suite"); then
		echo "FAIL $suite: no clean-room image"
		failed=$((failed + 1))
		continue
	fi
	echo "image $tag ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
	status=0
	name=gvx-cleanroom-$suite-$$
	timeout 600 docker run --rm --name "$name" --pull never --network none --user 1000:1000 \
		--cap-drop ALL --security-opt no-new-privileges \
		-e HOME=/home/user -w /home/user \
		-v "$wheels_in:/wheels:ro" -v "$here:/cleanroom:ro" \
		"$tag" /bin/bash /cleanroom/inside.sh || status=$?
	# timeout ends the docker client, not the container.
	[ "$status" != 124 ] || docker rm -f "$name" >/dev/null 2>&1 || true
	case $status in
	0) echo "PASS $suite: installed and used ($((SECONDS - start)) s)"; passed=$((passed + 1)) ;;
	3) echo "PASS $suite: pip refused the wheel, as its tags say it must ($((SECONDS - start)) s)"; passed=$((passed + 1)) ;;
	*) echo "FAIL $suite (exit $status, $((SECONDS - start)) s)"; failed=$((failed + 1)) ;;
	esac
done
echo "cleanroom: $passed passed, $failed failed"
[ "$failed" = 0 ]
