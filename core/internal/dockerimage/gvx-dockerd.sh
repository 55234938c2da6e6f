#!/bin/sh
# gvx-dockerd: the entrypoint of gvx's Docker image. It mounts the cgroup v1
# controllers gVisor provides and runs dockerd with its defaults (bridge
# network, iptables on) under tini, serving its API on its unix socket and
# on TCP port 2375, which rungv publishes to the host:
#
#   rungv run -p unix:/tmp/docker.sock:2375 IMAGE
#
# (its label dev.gfire.gvx.needs=nftables,net-raw has rungv turn on
# --nftables --net-raw, which dockerd's bridge network needs).
#
# Arguments are passed on to dockerd. The storage driver is overlay2, named
# explicitly: if /var/lib/docker cannot hold it, dockerd fails to start
# instead of falling back to the slow vfs driver.
set -eu

# tini reaps the containerd shims that end up as orphans and passes SIGINT
# and SIGTERM on, so rungv stopping the sandbox shuts dockerd down cleanly.
#
# The TCP socket is made here and handed to dockerd the way systemd (and
# Debian's docker.socket) does: -H fd:// with LISTEN_FDS and LISTEN_PID,
# which perl's child sets to its own process ID before it becomes dockerd. Binding
# tcp://0.0.0.0:2375 itself without TLS, dockerd pauses for a second on
# purpose. The socket is reachable only through what rungv publishes.
#
# perl also prepares the sandbox first, where a shell would start a mount(8)
# per file system (each exec of a dynamically linked binary costs 10-20 ms in
# a fresh sandbox; these mounts took 120-160 ms as commands):
#   - cgroup v1, as runc expects it: gVisor offers cpu, cpuacct, cpuset,
#     memory, devices and pids (not freezer or blkio);
#   - /var/lib/docker: overlay2 cannot put its upper layers on the sandbox's
#     root filesystem (itself an overlay). Without a volume mounted there
#     (rungv --mount type=volume,dst=/var/lib/docker), it is a tmpfs: memory,
#     like the root's writable layer it replaces.
# and checks it: without nftables (rungv --nftables) dockerd's iptables-nft
# cannot program anything and dockerd cannot start; without raw sockets
# (rungv --net-raw) containers lose ping and the like.
#
# perl starts containerd itself, with the configuration and paths dockerd
# would give it, and hands it to dockerd with --containerd. A containerd
# that dockerd starts gets 15 s to answer, else dockerd gives up ("timeout
# waiting for containerd to start"), and is restarted after three health
# checks of 3 s fail: on a host busy with many sandboxes containerd takes
# longer than that. Here it gets as long as it needs (gvx.docker.WAIT bounds
# the whole start); if it exits first, so does this script, saying how.
# containerd's own waits on its shims (5 s to delete or load one, 3 s to
# stop one, 2 s for a task's state) are raised to 120 s for the same reason:
# past them it kills the shim and leaves the container half cleaned up.
# perl then runs dockerd as its child, passes SIGINT and SIGTERM on to it,
# and once dockerd has exited stops containerd and waits for it, so that a
# stopped dockerd leaves /var/lib/docker consistent.
exec tini -s -- perl -MSocket -e '
	open(my $m, "<", "/proc/self/mounts") or die "gvx-dockerd: /proc/self/mounts: $!\n";
	my %mounted = map { (split / /)[1] => 1 } <$m>;
	close($m);
	# mount(2) is system call 165 on x86_64, the only architecture of this image.
	my ($nosuid, $nodev, $noexec) = (2, 4, 8);
	sub mnt {
		my ($type, $source, $target, $flags, $data) = @_;
		return if $mounted{$target};
		-d $target or mkdir($target, 0755) or die "gvx-dockerd: mkdir $target: $!\n";
		syscall(165, $source, $target, $type, 0 + $flags, $data) == 0 or die "gvx-dockerd: mount -t $type $source $target ($data): $!\n";
	}
	mnt("tmpfs", "cgroup", "/sys/fs/cgroup", $nosuid | $nodev | $noexec, "mode=755");
	mnt("cgroup", "cgroup", "/sys/fs/cgroup/$_", $nosuid | $nodev | $noexec, $_) for qw(cpu cpuacct cpuset memory devices pids);
	mnt("tmpfs", "tmpfs", "/var/lib/docker", 0, "mode=711");
	# AF_NETLINK, NETLINK_NETFILTER: refused when the Sentry has no nftables.
	socket(my $nf, 16, SOCK_RAW, 12) or die "gvx-dockerd: this sandbox has no nftables ($!), so dockerd cannot set up its bridge network: run it with rungv run --nftables --net-raw\n";
	close($nf);
	socket(my $raw, PF_INET, SOCK_RAW, 1) or warn "gvx-dockerd: no raw sockets in this sandbox ($!): containers cannot ping; run it with rungv run --net-raw\n";
	close($raw) if $raw;

	my $run = "/var/run/docker/containerd";
	for my $d ("/var/run/docker", $run) { -d $d or mkdir($d, 0711) or die "gvx-dockerd: mkdir $d: $!\n" }
	open(my $conf, ">", "$run/containerd.toml") or die "gvx-dockerd: $run/containerd.toml: $!\n";
	print $conf join("\n",
		"root = \"/var/lib/docker/containerd/daemon\"", "state = \"$run/daemon\"", "disabled_plugins = [\"cri\"]",
		"[grpc]", "address = \"$run/containerd.sock\"", "max_recv_message_size = 16777216", "max_send_message_size = 16777216",
		"[debug]", "address = \"$run/containerd-debug.sock\"", "level = \"info\"",
		"[timeouts]", map("\"io.containerd.timeout.$_\" = \"120s\"", qw(shim.cleanup shim.load shim.shutdown task.state)),
		"[plugins.linux]", "shim = \"containerd-shim\"", "runtime = \"runc\"", "runtime_root = \"/var/lib/docker/runc\"", "");
	close($conf) or die "gvx-dockerd: $run/containerd.toml: $!\n";
	unlink("$run/containerd.sock");
	my $containerd = fork() // die "gvx-dockerd: fork: $!\n";
	if (!$containerd) { exec("containerd", "--config", "$run/containerd.toml") or die "gvx-dockerd: exec containerd: $!\n" }
	open(my $pid, ">", "$run/containerd.pid") or die "gvx-dockerd: $run/containerd.pid: $!\n";
	print $pid "$containerd\n";
	close($pid) or die "gvx-dockerd: $run/containerd.pid: $!\n";
	sub exited { my ($what, $status) = @_; $status & 127 ? "$what was killed by signal " . ($status & 127) : "$what exited with status " . ($status >> 8) }
	# WNOHANG is 1 on Linux.
	for (;;) {
		socket(my $c, PF_UNIX, SOCK_STREAM, 0) or die "gvx-dockerd: socket: $!\n";
		my $up = connect($c, pack_sockaddr_un("$run/containerd.sock"));
		close($c);
		last if $up;
		waitpid($containerd, 1) == 0 or die "gvx-dockerd: " . exited("containerd", $?) . " before it answered\n";
		select(undef, undef, undef, 0.02);
	}

	$^F = 3; # descriptor 3 stays open across exec
	socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!\n";
	setsockopt($s, SOL_SOCKET, SO_REUSEADDR, 1) or die "setsockopt: $!\n";
	bind($s, pack_sockaddr_in(2375, INADDR_ANY)) or die "bind 0.0.0.0:2375: $!\n";
	listen($s, SOMAXCONN) or die "listen: $!\n";
	fileno($s) == 3 or die "the API socket is descriptor " . fileno($s) . ", not 3\n";
	my $dockerd = fork() // die "gvx-dockerd: fork: $!\n";
	if (!$dockerd) {
		$ENV{LISTEN_FDS} = 1;
		$ENV{LISTEN_PID} = $$;
		exec { $ARGV[0] } @ARGV, "--containerd", "$run/containerd.sock" or die "exec $ARGV[0]: $!\n";
	}
	close($s);
	$SIG{$_} = sub { kill($_[0], $dockerd) } for qw(INT TERM);
	my $w;
	do { $w = waitpid($dockerd, 0) } until $w == $dockerd or $w == -1 && !$!{EINTR};
	my $status = $?;
	kill("TERM", $containerd);
	do { $w = waitpid($containerd, 0) } until $w == $containerd or $w == -1 && !$!{EINTR};
	warn "gvx-dockerd: " . exited("dockerd", $status) . "\n" if $status;
	exit($status & 127 ? 128 + ($status & 127) : $status >> 8);
' dockerd \
	-H unix:///var/run/docker.sock \
	-H fd:// \
	--storage-driver overlay2 \
	"$@"
