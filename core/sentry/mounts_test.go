package sentry

import (
	"strings"
	"testing"

	"gvisor.dev/gvisor/pkg/sentry/inet"
	"gvisor.dev/gvisor/pkg/sentry/socket/netstack"
)

func TestStandardMounts(t *testing.T) {
	s := newSandbox(t, Config{})
	r := startAndWait(t, s, sh(`cat /proc/mounts`))
	if r.status.ExitCode() != 0 {
		t.Fatalf("cat /proc/mounts: %v %s", r.status, r.stderr)
	}
	types := map[string]string{}
	for _, l := range lines(r.stdout) {
		f := strings.Fields(l)
		if len(f) >= 3 {
			types[f[1]] = f[2]
		}
	}
	// gVisor names its /dev filesystem "dev"; it is a tmpfs inside.
	for target, fsType := range map[string]string{
		"/": "overlay", "/proc": "proc", "/sys": "sysfs", "/dev": "dev",
		"/dev/pts": "devpts", "/dev/mqueue": "mqueue", "/tmp": "tmpfs", "/run": "tmpfs",
	} {
		if types[target] != fsType {
			t.Errorf("%s is mounted as %q, want %q; /proc/mounts:\n%s", target, types[target], fsType, r.stdout)
		}
	}
}

func TestDevices(t *testing.T) {
	s := newSandbox(t, Config{})
	script := `
set -e
for d in null zero full random urandom tty; do test -c /dev/$d || { echo "no /dev/$d"; exit 1; }; done
test -e /dev/ptmx && test -d /dev/pts && test -d /dev/shm
echo -n dropped > /dev/null
test "$(head -c 4 /dev/zero | od -An -tx1 | tr -d ' ')" = 00000000
test "$(head -c 16 /dev/urandom | wc -c)" = 16
test "$(head -c 16 /dev/random | wc -c)" = 16
if echo x > /dev/full 2>/dev/null; then echo "/dev/full accepted a write"; exit 1; fi
echo shm > /dev/shm/x && cat /dev/shm/x
echo tmp > /tmp/x && cat /tmp/x
echo ok
`
	r := startAndWait(t, s, sh(script))
	if r.status.ExitCode() != 0 || r.stdout != "shm\ntmp\nok\n" {
		t.Fatalf("%v stdout %q stderr %q", r.status, r.stdout, r.stderr)
	}
}

func TestMountableInside(t *testing.T) {
	s := newSandbox(t, Config{})
	script := `
set -e
mkdir -p /mnt/t /mnt/lower /mnt/o /mnt/p /mnt/pts /mnt/mq /mnt/cg2
test -d /sys/fs/cgroup
mount -t tmpfs none /mnt/t
mkdir /mnt/t/upper /mnt/t/work
echo lower > /mnt/lower/f
mount -t overlay overlay -o lowerdir=/mnt/lower,upperdir=/mnt/t/upper,workdir=/mnt/t/work /mnt/o
echo upper >> /mnt/o/f
test "$(cat /mnt/o/f)" = "$(printf 'lower\nupper')"
test "$(cat /mnt/lower/f)" = lower
mount -t proc proc /mnt/p && test -r /mnt/p/self/status
mount -t devpts devpts /mnt/pts
mount -t mqueue mqueue /mnt/mq
mount -t cgroup2 cgroup2 /mnt/cg2 && test -e /mnt/cg2/cgroup.procs
mount -t tmpfs cgroup_root /sys/fs/cgroup
for c in cpu cpuacct cpuset memory devices pids; do
	mkdir /sys/fs/cgroup/$c
	mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c
done
test -e /sys/fs/cgroup/memory/memory.limit_in_bytes
test -e /sys/fs/cgroup/pids/pids.current
umount /mnt/o
echo ok
`
	r := startAndWait(t, s, sh(script))
	if r.status.ExitCode() != 0 || r.stdout != "ok\n" {
		t.Fatalf("%v stdout %q stderr %q", r.status, r.stdout, r.stderr)
	}
}

func TestErofsNotMountableInside(t *testing.T) {
	// erofs takes a host descriptor number as an option; the guest must
	// not be able to name one.
	s := newSandbox(t, Config{})
	r := startAndWait(t, s, sh(`mkdir -p /mnt/e; mount -t erofs -o ifd=3 none /mnt/e && echo mounted`))
	if r.status.ExitCode() == 0 || strings.Contains(r.stdout, "mounted") {
		t.Fatalf("guest mounted erofs: %v %q %q", r.status, r.stdout, r.stderr)
	}
}

func TestHostnameAndCPUs(t *testing.T) {
	s := newSandbox(t, Config{Hostname: "box-1", CPUs: 3})
	r := startAndWait(t, s, sh(`hostname; nproc; grep -c ^processor /proc/cpuinfo`))
	if r.stdout != "box-1\n3\n3\n" {
		t.Fatalf("got %q %q", r.stdout, r.stderr)
	}
}

func TestLoopbackOnly(t *testing.T) {
	s := newSandbox(t, Config{})
	r := startAndWait(t, s, sh(`ip -o link show | cut -d: -f2 | tr -d " "; ip addr show lo | grep -c 'inet 127.0.0.1/8'
`+loopbackRoundTrip("over-loopback")))
	if r.stdout != "lo\n1\nover-loopback\n" {
		t.Fatalf("got %q stderr %q", r.stdout, r.stderr)
	}
}

func TestNetworkNamespaceGetsLoopback(t *testing.T) {
	s := newSandbox(t, Config{})
	r := startAndWait(t, s, sh(`unshare -n sh -c 'ip -o link show | cut -d: -f2 | tr -d " "; ip addr show lo | grep -c "inet 127.0.0.1"'`))
	if r.status.ExitCode() != 0 || r.stdout != "lo\n1\n" {
		t.Fatalf("%v %q %q", r.status, r.stdout, r.stderr)
	}
}

func TestNFTables(t *testing.T) {
	s := newSandbox(t, Config{NFTables: true})
	root := s.k.RootNetworkNamespace().Stack().(*netstack.Stack).Stack
	if root.NFTables() == nil {
		t.Fatal("the root stack has no nftables")
	}
	// A namespace as unshare(CLONE_NEWNET) makes it, through our creator.
	ns := inet.NewNamespace(s.k.RootNetworkNamespace(), s.k.RootUserNamespace())
	defer ns.Destroy(s.k.SupervisorContext())
	if ns.Stack().(*netstack.Stack).Stack.NFTables() == nil {
		t.Fatal("a guest network namespace's stack has no nftables")
	}
}
