#!/usr/bin/env bash
# Runs gvx's benchmarks; `make bench` calls it after building.
#   benchmarks/run.sh [erofs|startup|net|volume|docker|fleet|execburst|copy|episode|ray|work|harness]...   (default: all)
# Speed and memory targets live here, never as timed assertions in tests.
# Results go to stdout as markdown tables, side by side with the anchors.
set -euo pipefail
cd "$(dirname "$0")/.."
bench="${GVX_CACHE:-$HOME/.cache/gvx}/bench"
mkdir -p "$bench"

# OCI image → EROFS conversion of a ~500-700 MB Debian rootfs, against
# mkfs.erofs on the unpacked tree.
erofs() {
	local rootfs="$bench/debian-rootfs"
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
}

# runsc_bin builds runsc from the gVisor version gvx pins (once) and prints
# its path. It is built in a throw-away module, so gvx's go.sum stays its
# own, and kept world-readable for --rootless.
runsc_bin() {
	local anchors=/var/tmp/gvx-bench
	mkdir -p "$anchors" && chmod 755 "$anchors"
	local gv
	gv=$(go list -m -f '{{.Version}}' gvisor.dev/gvisor)
	local runsc="$anchors/runsc-$gv"
	if [ ! -x "$runsc" ]; then
		echo "building runsc $gv (once) …" >&2
		local mod
		mod=$(mktemp -d)
		printf 'module runscbench\n\ngo 1.26\n\nrequire gvisor.dev/gvisor %s\n' "$gv" >"$mod/go.mod"
		(cd "$mod" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -o "$runsc" gvisor.dev/gvisor/runsc)
		rm -rf "$mod"
		chmod 755 "$runsc"
	fi
	echo "$runsc"
}

# host_docker makes the docker CLI reach a daemon for the host-docker
# anchors. When none runs and this is root, it starts a private one — its own
# data root, exec root and socket under $bench, no bridge, no iptables, so the
# host's network is untouched and the anchors run with --network none — and
# stops it when the benchmarks end. It returns non-zero, saying why, when
# there is no daemon to use.
private_dockerd_pid=""
host_docker() {
	docker info >/dev/null 2>&1 && return 0
	if [ "$(id -u)" != 0 ]; then
		echo "(no docker daemon, and starting a private one needs root: the docker anchors are skipped)"
		return 1
	fi
	if ! command -v dockerd >/dev/null; then
		echo "installing docker.io for the host-docker anchors …" >&2
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null ||
			{ echo "(docker.io could not be installed: the docker anchors are skipped)"; return 1; }
	fi
	local dir="$bench/dockerd"
	mkdir -p "$dir"
	dockerd --bridge=none --iptables=false --ip6tables=false --data-root "$dir/root" --exec-root "$dir/exec" \
		--pidfile "$dir/dockerd.pid" -H "unix://$dir/docker.sock" >"$dir/dockerd.log" 2>&1 &
	private_dockerd_pid=$!
	trap stop_private_dockerd EXIT
	export DOCKER_HOST="unix://$dir/docker.sock"
	for _ in $(seq 150); do
		docker info >/dev/null 2>&1 && { echo "(a private dockerd runs for the docker anchors; its log: $dir/dockerd.log)"; return 0; }
		kill -0 "$private_dockerd_pid" 2>/dev/null || break
		sleep 0.2
	done
	echo "(the private dockerd did not start, see $dir/dockerd.log: the docker anchors are skipped)"
	stop_private_dockerd
	return 1
}

stop_private_dockerd() {
	[ -n "$private_dockerd_pid" ] || return 0
	kill "$private_dockerd_pid" 2>/dev/null || true
	wait "$private_dockerd_pid" 2>/dev/null || true
	private_dockerd_pid=""
	unset DOCKER_HOST
}

# Sandbox start, exec round trip and idle memory, against runsc built from
# the gVisor version gvx pins and host docker.
# exec_floor separates what an exec costs in gVisor from what the executed
# binary costs (core/sentry's BenchmarkExecFloor, in-process, no control
# round trip): an executable whose one system call is exit_group, the same
# after 1 and 7 text pages with a system call site each, and busybox true.
exec_floor() {
	echo "## The floor under an exec (in-process: \`go test -bench ExecFloor ./core/sentry\`, 300 execs, mean)"
	echo
	echo "| executable | systrap | ptrace |"
	echo "|---|---|---|"
	local platform
	for platform in systrap ptrace; do
		GVX_BENCH_PLATFORM=$platform CGO_ENABLED=0 go test -run '^$' -bench ExecFloor -benchtime 300x ./core/sentry |
			awk -v p="$platform" '/^BenchmarkExecFloor\// { sub(/^BenchmarkExecFloor\//, "", $1); sub(/-[0-9]+$/, "", $1); printf "%s %s %.2f\n", p, $1, $3 / 1e6 }'
	done | awk '{ ms[$2, $1] = $3; if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
		END { for (i = 1; i <= n; i++) printf "| %s | %.2f ms | %.2f ms |\n", order[i], ms[order[i], "systrap"], ms[order[i], "ptrace"] }'
}

startup() {
	local anchors=/var/tmp/gvx-bench runsc
	runsc=$(runsc_bin)
	local ref
	ref=$(go run ./core/internal/testimage/mkimage -default "$bench/default-image" -docker-archive "$bench/default-image.tar")
	build/rungv pull -q "$ref" >/dev/null
	# An OCI bundle of the same image for `runsc run` and `runsc exec`.
	local bundle="$anchors/bundle"
	if [ ! -f "$bundle/config.json" ]; then
		local erofs_file
		erofs_file=$(build/rungv images --format json | python3 -c '
import json, sys
print([i["erofs"] for i in json.load(sys.stdin) if sys.argv[1] in i["refs"]][0])' "$ref")
		rm -rf "$bundle" && mkdir -p "$bundle"
		fsck.erofs --extract="$bundle/rootfs" "$erofs_file" >/dev/null
		(cd "$bundle" && "$runsc" spec -- /bin/sleep 3600)
	fi
	local docker_args=()
	if host_docker; then
		docker load -q -i "$bench/default-image.tar" >/dev/null
		docker_args=(-docker-image gvx.test/default:latest)
	fi
	echo "== sandbox start, exec round trip, idle memory"
	go run ./benchmarks/startup -rungv build/rungv -image "$ref" -runsc "$runsc" -bundle "$bundle" "${docker_args[@]}" -n "${N:-50}"
	echo
	exec_floor
	echo
	echo "== Python: env.reset() and steps/s"
	local py_docker=()
	[ ${#docker_args[@]} -eq 0 ] || py_docker=(--docker-image gvx.test/default:latest)
	PYTHONPATH=python GVX_LIBRARY="$PWD/build/libgvx.so" GVX_RUNGV="$PWD/build/rungv" \
		.venv/bin/python benchmarks/env_reset.py --runsc "$runsc" "${py_docker[@]}" -n "${N:-100}"
}

# 100 MB through published ports and the NAT, and connection setup, next
# to host loopback.
net() {
	local ref
	ref=$(go run ./core/internal/testimage/mkimage | head -1)
	echo "== network throughput and connection latency"
	go run ./benchmarks/netthroughput -rungv build/rungv -image "$ref" -mb "${MB:-100}" -n "${RUNS:-3}"
}

# ext4 volumes: untar onto a volume vs tmpfs in one sandbox, metadata
# rates at 1k and 100k entries per directory, clone latency of 4 GiB.
volume() {
	local ref
	ref=$(go run ./core/internal/testimage/mkimage | head -1)
	echo "== ext4 volumes"
	go run ./benchmarks/volume -rungv build/rungv -image "$ref" -runs "${RUNS:-5}"
}

# Docker inside: start → `docker info` on a clone of a golden
# /var/lib/docker, episodes and load cycles, beside runsc do + dockerd on
# tmpfs (root); then from Python with and without the warm pool.
# (Not named docker: the other benchmarks call the docker CLI.)
docker_inside() {
	local image runsc
	image=$(go run ./core/internal/dockerimage/mkdockerimage -q)
	runsc=$(runsc_bin)
	go run ./core/internal/testimage/mkimage -default "$bench/default-image" -docker-archive "$bench/default-image.tar" >/dev/null
	echo "== Docker inside: start → ready, episodes"
	go run ./benchmarks/dockerready -rungv build/rungv -image "$image" -archive "$bench/default-image.tar" \
		-archive-image gvx.test/default:latest -runsc "$runsc" -n "${N:-20}"
	echo
	echo "== Docker episodes from Python (GvxEnv, golden clones)"
	PYTHONPATH=python GVX_LIBRARY="$PWD/build/libgvx.so" GVX_RUNGV="$PWD/build/rungv" \
		.venv/bin/python benchmarks/docker_env.py --docker-image "$image" --archive "$bench/default-image.tar" -n "${N:-20}"
}

# Execs that reach one sandbox together: 16 `true`s at once, many rounds;
# EXECBURST_AB=OTHER_RUNGV alternates rounds with a second binary (an A/B).
execburst() {
	local ref bins=build/rungv
	ref=$(go run ./core/internal/testimage/mkimage -default "$bench/default-image" -docker-archive "$bench/default-image.tar")
	[ -z "${EXECBURST_AB:-}" ] || bins="$EXECBURST_AB,build/rungv"
	echo "== Execs at once in one sandbox"
	go run ./benchmarks/execburst -rungv "$bins" -image "$ref" -concurrent "${EXECBURST_C:-16}" -rounds "${ROUNDS:-60}"
}

# Many sandboxes at once, as an RL trainer runs them: boot 128, then a first
# and a second command in each with 16 in flight.
fleet() {
	local ref
	ref=$(go run ./core/internal/testimage/mkimage -default "$bench/default-image" -docker-archive "$bench/default-image.tar")
	echo "== A fleet of sandboxes"
	go run ./benchmarks/fleet -rungv build/rungv -image "$ref" -n "${FLEET_N:-128}" -c "${FLEET_C:-16}" -runs "${RUNS:-5}"
	echo
	go run ./benchmarks/fleet -rungv build/rungv -image "$ref" -n "${FLEET_N:-128}" -c "${FLEET_C:-16}" -runs "${RUNS:-5}" -pin
}

# A source tree into and out of a sandbox (Sandbox.upload/download), against
# tar through exec and host `docker cp`.
copy() {
	local docker_args=()
	if host_docker; then
		docker load -q -i "$bench/default-image.tar" >/dev/null 2>&1 && docker_args=(--docker-image gvx.test/default:latest)
	fi
	echo "== Copying a source tree in and out"
	PYTHONPATH=python GVX_LIBRARY="$PWD/build/libgvx.so" GVX_RUNGV="$PWD/build/rungv" \
		.venv/bin/python benchmarks/copy_tree.py --runs "${RUNS:-5}" "${docker_args[@]}"
}

# What one Docker episode costs a node (CPU, memory, disk), for sizing a cluster.
episode() {
	local image
	image=$(go run ./core/internal/dockerimage/mkdockerimage -q)
	go run ./core/internal/testimage/mkimage -default "$bench/default-image" -docker-archive "$bench/default-image.tar" >/dev/null
	echo "== one Docker episode's CPU, memory and disk"
	PYTHONPATH=python GVX_LIBRARY="$PWD/build/libgvx.so" GVX_RUNGV="$PWD/build/rungv" \
		.venv/bin/python benchmarks/episode_cost.py --docker-image "$image" --archive "$bench/default-image.tar" -n "${N:-5}"
}

# The Ray hop and scaling over nodes: the tests' three-node cluster on this
# machine, loopback only (needs root for its network namespace).
ray_hop() {
	echo "== gvx.ray: the Ray hop and scaling over nodes"
	PYTHONPATH=python GVX_LIBRARY="$PWD/build/libgvx.so" GVX_RUNGV="$PWD/build/rungv" \
		.venv/bin/python benchmarks/ray_hop.py -n "${N:-300}" -rounds "${ROUNDS:-5}"
}

# Work per core: click's test suite, N copies at once, under gvx, host
# Docker and runsc (same image, same command, same run).
work() {
	local runsc py_docker=()
	runsc=$(runsc_bin)
	host_docker && py_docker=(--docker)
	echo "== work per core: a test suite, N copies at once"
	PYTHONPATH=python GVX_LIBRARY="$PWD/build/libgvx.so" GVX_RUNGV="$PWD/build/rungv" \
		.venv/bin/python benchmarks/work_per_core.py --runsc "$runsc" "${py_docker[@]}" --no-spin --profile --ns "${NS:-1,2,4,8,16}" --rounds "${ROUNDS:-2}"
}

# One agent step through each harness adapter (mini-swe-agent, SkyRL-Gym, verl),
# beside mini-swe-agent's own Docker backend on host docker (--network none,
# the same busybox image), same run; and episode start → first command.
harness() {
	local docker_args=()
	go run ./core/internal/testimage/mkimage -default "$bench/default-image" -docker-archive "$bench/default-image.tar" >/dev/null
	if host_docker; then
		docker load -q -i "$bench/default-image.tar" >/dev/null 2>&1 && docker_args=(--docker-image gvx.test/default:latest)
	fi
	echo "== one agent step through the harness adapters"
	PYTHONPATH=python GVX_LIBRARY="$PWD/build/libgvx.so" GVX_RUNGV="$PWD/build/rungv" \
		.venv/bin/python benchmarks/harness_step.py "${docker_args[@]}" -n "${N:-100}" -m "${M:-20}"
	# verl (with torch) has a venv of its own, which make test-integrations makes.
	echo "== one tool call through verl's ToolAgentLoop"
	make -s deps-verl
	PYTHONPATH=python GVX_LIBRARY="$PWD/build/libgvx.so" GVX_RUNGV="$PWD/build/rungv" \
		"${GVX_CACHE:-$HOME/.cache/gvx}/verl-venv/bin/python" benchmarks/harness_step.py -n "${N:-100}" -m "${M:-20}"
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(erofs startup net volume docker fleet execburst copy episode ray work harness)
for t in "${targets[@]}"; do
	case "$t" in
	erofs | startup | net | volume | fleet | execburst | copy) "$t" ;;
	docker) docker_inside ;;
	episode) episode ;;
	ray) ray_hop ;;
	work) work ;;
	harness) harness ;;
	*) echo "unknown benchmark $t (erofs, startup, net, volume, docker, fleet, execburst, copy, episode, ray, work, harness)" >&2; exit 2 ;;
	esac
done
