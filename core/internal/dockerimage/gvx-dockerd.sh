#!/bin/sh
# gvx-dockerd: the entrypoint of gvx's Docker image. It mounts the cgroup v1
# controllers gVisor provides and runs dockerd with its defaults (bridge
# network, iptables on) under tini, listening on its unix socket and on TCP
# port 2375, which rungv publishes to the host:
#
#   rungv run --nftables --net-raw -p unix:/tmp/docker.sock:2375 IMAGE
#
# Arguments are passed on to dockerd. The storage driver is overlay2, named
# explicitly: if /var/lib/docker cannot hold it, dockerd fails to start
# instead of falling back to the slow vfs driver.
set -eu

# cgroup v1, as runc expects it: gVisor offers cpu, cpuacct, cpuset, memory,
# devices and pids (not freezer or blkio).
if ! mountpoint -q /sys/fs/cgroup; then
	mount -t tmpfs -o nosuid,nodev,noexec,mode=755 cgroup /sys/fs/cgroup
fi
for c in cpu cpuacct cpuset memory devices pids; do
	mkdir -p "/sys/fs/cgroup/$c"
	if ! mountpoint -q "/sys/fs/cgroup/$c"; then
		mount -t cgroup -o "nosuid,nodev,noexec,$c" cgroup "/sys/fs/cgroup/$c"
	fi
done

# overlay2 cannot put its upper layers on the sandbox's root filesystem
# (itself an overlay). Without a volume mounted there (rungv --mount
# type=volume,dst=/var/lib/docker), /var/lib/docker is a tmpfs: memory,
# like the root's writable layer it replaces.
mkdir -p /var/lib/docker
if ! mountpoint -q /var/lib/docker; then
	mount -t tmpfs -o mode=711 tmpfs /var/lib/docker
fi

# tini reaps the containerd shims that end up as orphans and passes SIGINT
# and SIGTERM on, so `rungv` stopping the sandbox shuts dockerd down
# cleanly. --tls=false says the unauthenticated TCP socket is intended
# (dockerd otherwise sleeps 15 s at start); it is reachable only through
# what rungv publishes.
exec tini -s -- dockerd \
	-H unix:///var/run/docker.sock \
	-H tcp://0.0.0.0:2375 --tls=false \
	--storage-driver overlay2 \
	"$@"
