#!/usr/bin/env bash
# The seed workflow of Docker inside gvx, end to end:
#
#   1. a seed sandbox runs dockerd on a new golden volume at /var/lib/docker;
#      the host's docker CLI loads images into it through the unix socket
#      rungv publishes (-p unix:SEED.sock:2375) — no host dockerd involved;
#   2. ^C (SIGINT) stops it: dockerd shuts down, rungv writes the volume back
#      and closes it clean;
#   3. every episode runs on an O(1) clone of the golden (`rungv volume
#      clone`): its dockerd has the images at once, with no load, and sees
#      nothing of other episodes.
#
# Usage: examples/golden_docker.sh [WORKDIR]   (default: a temporary directory)
# Needs: build/rungv (make rungv) or $RUNGV, the docker CLI, and the Docker
# image (make docker-image builds it once, as root).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNGV=${RUNGV:-$PWD/build/rungv}
DOCKER=${DOCKER:-docker}
work=${1:-}
if [ -z "$work" ]; then
	work=$(mktemp -d /tmp/gvx-golden-XXXXXX)
	trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

image=$(go run ./core/internal/dockerimage/mkdockerimage -q)
# A small image to load: gvx's busybox test image, as a `docker save` tarball.
go run ./core/internal/testimage/mkimage -default "$work/busybox" -docker-archive "$work/busybox.tar" >/dev/null

# start NAME VOLUME: runs a Docker sandbox on VOLUME in the background,
# publishing dockerd's API as $work/NAME.sock, and waits until it answers.
start() {
	local name=$1 volume=$2
	rm -f "$work/$name.sock"
	"$RUNGV" run -q --nftables --net-raw \
		--mount "type=volume,src=$volume,dst=/var/lib/docker" \
		-p "unix:$work/$name.sock:2375" \
		"$image" >"$work/$name.log" 2>&1 &
	pid=$!
	export DOCKER_HOST="unix://$work/$name.sock"
	local t0=$SECONDS
	until "$DOCKER" version >/dev/null 2>&1; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "the $name sandbox exited; its log:" >&2
			tail -n 20 "$work/$name.log" >&2
			exit 1
		fi
		if [ $((SECONDS - t0)) -gt 60 ]; then
			echo "dockerd in the $name sandbox did not answer within 60 s" >&2
			exit 1
		fi
		sleep 0.05
	done
}

# stop: SIGINT, as ^C would; rungv exits once dockerd has shut down and the
# volume is written back.
stop() {
	kill -INT "$pid"
	wait "$pid"
}

echo "== seed: a new golden volume, images loaded through the published socket"
"$RUNGV" volume create "$work/golden.ext4"
start seed "$work/golden.ext4"
"$DOCKER" load -i "$work/busybox.tar"
"$DOCKER" tag gvx.test/default:latest busybox:latest
"$DOCKER" info --format 'storage driver: {{.Driver}} on {{range .DriverStatus}}{{if eq (index . 0) "Backing Filesystem"}}{{index . 1}}{{end}}{{end}}'
stop
# dockerd deletes and remakes its default bridge network at every start. The
# seed made no network of its own, so its network database stays out of the
# golden: episodes' dockerd then skip taking down a bridge network their fresh
# sandbox never had (about 30 iptables commands, 0.3 s).
"$RUNGV" run -q --entrypoint rm --mount "type=volume,src=$work/golden.ext4,dst=/var/lib/docker" \
	"$image" -f /var/lib/docker/network/files/local-kv.db
"$RUNGV" volume check "$work/golden.ext4"

for ep in 1 2; do
	echo "== episode $ep: a clone of the golden"
	"$RUNGV" volume clone "$work/golden.ext4" "$work/episode$ep.ext4"
	start "episode$ep" "$work/episode$ep.ext4"
	"$DOCKER" images --format '{{.Repository}}:{{.Tag}} {{.Size}}'
	echo "containers before: $("$DOCKER" ps -aq | wc -l)"
	"$DOCKER" run --name "left-by-episode$ep" busybox echo "hello from episode $ep"
	stop
done
echo "== each episode saw the golden's images, and neither saw the other's container"
