// Package escapeprobe is the escape part of the reliability battery (issue
// 17): probes that guest root runs — in a sandbox, or in a `docker run
// --privileged` container inside one — against host files, processes,
// devices, mounts, kernel interfaces, sockets, the clock, names and
// set-ID bits, and the host-side targets and checks that tell whether any
// of them got out.
//
// A probe's own output says what the guest saw; only the host is judged:
// hoststate before and after each group of probes, and the targets Host
// sets up (a secret file, a canary process, listeners).
package escapeprobe

import (
	"fmt"
	"strings"
)

// Probe is one escape attempt.
type Probe struct {
	// Name is unique.
	Name string
	// Group gathers probes the host compares itself after.
	Group string
	// Script is a busybox sh snippet run as guest root, with Host.Env's
	// variables and /probe (the probe binary, see cmd probe).
	Script string
	// MustNot is what it must not achieve on the host.
	MustNot string
	// Where says where the probe is meaningful: "" both in a sandbox and
	// in a privileged container, Sandbox only in a sandbox with a volume
	// at /data.
	Where Where
}

// Where a probe runs.
type Where int

const (
	// Everywhere: in the sandbox and in a privileged container in one.
	Everywhere Where = iota
	// Sandbox: only directly in a sandbox with a volume at /data (and
	// not in a container sharing its sandbox's pids).
	Sandbox
	// Docker: only in a privileged container.
	Docker
)

// Probes is the battery. Its order matters only at the end: reboot ends
// the sandbox.
var Probes = []Probe{
	// Host files.
	{Name: "proc-1-root", Group: "files", MustNot: "read the host's secret file through /proc/1/root or /proc/self/root",
		Script: `ls /proc/1/root/ >/dev/null; cat /proc/1/root$SECRET_FILE /proc/self/root$SECRET_FILE /proc/1/cwd$SECRET_FILE $SECRET_FILE; ls -la /proc/1/root$HOST_DIR`},
	{Name: "proc-self-exe", Group: "files", MustNot: "read or change the rungv binary through /proc/self/exe",
		Script: `sha256sum /proc/self/exe /proc/1/exe; ls -l /proc/self/exe /proc/1/exe; echo x >> /proc/self/exe; echo x >> /proc/1/exe; head -c 64 /proc/1/maps; cp /proc/1/exe /tmp/exe && sha256sum /tmp/exe`},
	{Name: "proc-mem", Group: "files", MustNot: "read or write memory outside the guest through /proc/PID/mem",
		Script: `sleep 30 & p=$!; dd if=/proc/$p/mem bs=4096 skip=1024 count=1 2>&1 | wc -c; dd if=/dev/zero of=/proc/$p/mem bs=1 count=8 seek=4194304 conv=notrunc; dd if=/proc/self/mem bs=1 count=8 skip=0; kill $p; head -c 100 /proc/kcore | wc -c`},
	{Name: "host-paths", Group: "files", MustNot: "create or change files in host directories",
		Script: `ls $HOST_DIR; for d in /tmp /etc /root /dev/shm /run /var/tmp $HOST_DIR; do mkdir -p $d; echo escaped > $d/gvx-probe-$MARKER; done; echo escaped >> /etc/passwd; ls /tmp`},
	{Name: "volume-dotdot", Group: "files", Where: Sandbox, MustNot: "reach host files through ../ or symlinks on a volume",
		Script: `cat /data/../../..$SECRET_FILE; cd /data && cat ../../../..$SECRET_FILE; ln -sf $SECRET_FILE /data/link; cat /data/link; ln -sfn / /data/rootlink; ls /data/rootlink$HOST_DIR; ln -sfn $HOST_DIR /data/hostdir; echo escaped > /data/hostdir/gvx-probe-$MARKER; ls -l /data`},
	{Name: "open-by-handle", Group: "files", MustNot: "open host files by guessed handles (open_by_handle_at)",
		Script: `/probe handles`},
	// Host processes.
	{Name: "proc-list", Group: "processes", MustNot: "see host processes in /proc",
		Script: `ls /proc | grep -c '^[0-9]'; cat /proc/[0-9]*/cmdline | tr '\0' ' '; echo; ps`},
	{Name: "kill-host-pids", Group: "processes", MustNot: "signal host processes by their host pids",
		Script: `kill -STOP $CANARY_PID; kill -9 $CANARY_PID $TEST_PID; kill -9 -$CANARY_PID`},
	{Name: "ptrace", Group: "processes", MustNot: "ptrace or read the memory of host processes",
		Script: `sleep 30 & p=$!; /probe ptrace $p $CANARY_PID $TEST_PID; kill $p`},
	// In a container sharing its sandbox's pids this would end dockerd.
	{Name: "kill-all", Group: "processes", Where: Sandbox, MustNot: "kill host processes with kill -9 -1",
		Script: `sh -c 'kill -9 -1'; echo survived`},
	// Devices.
	{Name: "mknod-disks", Group: "devices", MustNot: "read, write or mount host disks by device number",
		Script: `for d in 8:0 253:0 254:0 259:0 202:0 179:0 7:0; do n=/tmp/b${d%:*}; mknod $n b ${d%:*} ${d#*:}; dd if=$n bs=512 count=1 2>&1 | wc -c; dd if=/dev/null of=$n count=0; mkdir -p /mnt/${d%:*}; mount -o ro $n /mnt/${d%:*}; done; ls /dev`},
	{Name: "loop-devices", Group: "devices", MustNot: "attach or write host loop devices",
		Script: `mknod /tmp/loop-control c 10 237; mknod /tmp/loop0 b 7 0; dd if=/dev/zero of=/tmp/img bs=1k count=64 2>/dev/null; losetup /tmp/loop0 /tmp/img; losetup -f; dd if=/dev/zero of=/tmp/loop0 bs=512 count=1`},
	{Name: "dev-mem", Group: "devices", MustNot: "read host memory or I/O ports through /dev/mem, /dev/kmem, /dev/port",
		Script: `mknod /tmp/mem c 1 1; mknod /tmp/kmem c 1 2; mknod /tmp/port c 1 4; for n in /tmp/mem /tmp/kmem /tmp/port /dev/mem; do dd if=$n bs=4096 count=1 skip=256 2>&1 | wc -c; done; devmem 0xfed00000`},
	{Name: "kmsg", Group: "devices", MustNot: "write the host kernel log",
		Script: `mknod /tmp/kmsg c 1 11; echo "gvx-probe $MARKER" > /tmp/kmsg; echo "gvx-probe $MARKER" > /dev/kmsg; dmesg | tail -n 2; logger gvx-probe-$MARKER`},
	{Name: "kvm", Group: "devices", MustNot: "open the host's /dev/kvm",
		Script: `mknod /tmp/kvm c 10 232; /probe kvm /tmp/kvm /dev/kvm`},
	{Name: "sysrq", Group: "devices", MustNot: "trigger SysRq on the host",
		Script: `echo h > /proc/sysrq-trigger; mknod /tmp/tty0 c 4 0; echo x > /tmp/tty0`},
	// Mounts.
	{Name: "mount-filesystems", Group: "mounts", MustNot: "mount anything on the host",
		Script: `for f in proc sysfs tmpfs devtmpfs cgroup2 debugfs securityfs tracefs bpf configfs fusectl; do mkdir -p /m/$f; mount -t $f $f /m/$f; done; mkdir -p /m/bind; mount --bind / /m/bind; mount -o remount,rw /; mount --make-rshared /; cat /m/proc/1/cmdline; ls /m/sysfs/block /m/debugfs; grep -c . /proc/self/mounts`},
	{Name: "unshare-mount", Group: "mounts", MustNot: "leave a mount or namespace on the host",
		Script: `unshare -m sh -c 'mount -t tmpfs x /mnt && echo private tmpfs'; unshare -U -r id; unshare -n ip link; nsenter -t 1 -m -u -n -i -p true && echo nsenter ok; /probe system`},
	{Name: "pivot-root", Group: "mounts", MustNot: "pivot the host's root",
		Script: `mkdir -p /pr && mount -t tmpfs x /pr && mkdir /pr/old && cp /bin/busybox /pr/ && unshare -m sh -c 'cd /pr && pivot_root . old && /busybox ls /old'`},
	{Name: "chroot-escape", Group: "mounts", MustNot: "climb out of a chroot to host files",
		Script: `/probe chroot $SECRET_FILE`},
	{Name: "cgroup-release-agent", Group: "mounts", MustNot: "run a host program through a cgroup v1 release_agent",
		Script: `mkdir -p /tmp/cg && mount -t cgroup -o memory cgroup /tmp/cg; mkdir -p /tmp/cg/x; echo 1 > /tmp/cg/x/notify_on_release; printf '#!/bin/sh\necho escaped > /tmp/gvx-probe-release\n' > /tmp/ra; chmod +x /tmp/ra; echo /tmp/ra > /tmp/cg/release_agent; sh -c 'echo $$ > /tmp/cg/x/cgroup.procs'; mkdir -p /sys/fs/cgroup/gvx-probe; echo $$ > /sys/fs/cgroup/gvx-probe/cgroup.procs; echo max > /sys/fs/cgroup/cgroup.max.depth`},
	// Kernel interfaces.
	{Name: "modules", Group: "kernel", MustNot: "load or remove host kernel modules",
		Script: `/probe modules; insmod /tmp/none.ko; modprobe dummy; rmmod ext4; lsmod`},
	{Name: "bpf", Group: "kernel", MustNot: "create host bpf maps or programs",
		Script: `/probe bpf`},
	{Name: "perf", Group: "kernel", MustNot: "open host perf events",
		Script: `/probe perf`},
	{Name: "keyctl", Group: "kernel", MustNot: "add a key to a host keyring",
		Script: `/probe keys gvx-probe-$MARKER; cat /proc/keys /proc/key-users`},
	{Name: "io-uring-userfaultfd", Group: "kernel", MustNot: "reach the host's io_uring, userfaultfd, iopl or acct",
		Script: `/probe uring`},
	{Name: "swapon", Group: "kernel", MustNot: "add host swap",
		Script: `dd if=/dev/zero of=/tmp/swapfile bs=1M count=1 2>/dev/null; mkswap /tmp/swapfile; swapon /tmp/swapfile; cat /proc/swaps`},
	// Sockets.
	{Name: "host-sockets", Group: "sockets", MustNot: "connect to the host's unix, abstract, TCP or UDP listeners",
		Script: `/probe dial unix=$HOST_UNIX unix=@$HOST_ABSTRACT tcp=$HOST_TCP tcp=10.0.2.2:${HOST_TCP##*:} tcp=[::1]:${HOST_TCP##*:} udp=$HOST_UDP udp=10.0.2.2:${HOST_UDP##*:}; echo escaped | nc -w 1 127.0.0.1 ${HOST_TCP##*:}; ls -l $HOST_UNIX`},
	{Name: "raw-netlink-sockets", Group: "sockets", MustNot: "open raw, packet or netlink sockets on the host",
		Script: `/probe sockets`},
	{Name: "net-config", Group: "sockets", MustNot: "change host interfaces, addresses or routes",
		Script: `ip link add gvxprobe0 type dummy; ip addr add 192.0.2.77/24 dev lo; ip route add 198.51.100.0/24 dev lo; ip link set lo mtu 1280; ip -6 addr add 2001:db8::77/64 dev lo; ip link; ip route`},
	// The clock.
	{Name: "clock-date", Group: "clock", MustNot: "move the host's clock",
		Script: `date -s '2001-01-01 00:00:00'; date; adjtimex -o 500000; hwclock -w; date`},
	{Name: "clock-syscalls", Group: "clock", MustNot: "move the host's clock",
		Script: `/probe clock`},
	// Names and kernel settings.
	{Name: "hostname", Group: "sysctls", MustNot: "change the host's hostname or domain name",
		Script: `hostname gvx-probe-$MARKER; echo gvx-probe-$MARKER > /proc/sys/kernel/hostname; echo gvx-probe-$MARKER > /proc/sys/kernel/domainname; /probe names gvx-probe-$MARKER; hostname`},
	{Name: "proc-sys-writes", Group: "sysctls", MustNot: "change host sysctls",
		Script: `w() { echo "$2" > /proc/sys/$1; }; w kernel/core_pattern "|/tmp/gvx-probe-$MARKER"; w kernel/modprobe /tmp/gvx-probe; w kernel/sysrq 1; w kernel/panic 117; w kernel/printk 8; w kernel/randomize_va_space 0; w kernel/kptr_restrict 0; w kernel/unprivileged_bpf_disabled 0; w kernel/perf_event_paranoid -1; w vm/overcommit_memory 1; w vm/swappiness 1; w net/ipv4/ip_forward 1; w fs/suid_dumpable 2; w vm/drop_caches 1; sysctl -w kernel.ctrl-alt-del=1; cat /proc/sys/kernel/core_pattern`},
	// Set-ID bits.
	{Name: "setid-volume", Group: "setid", Where: Sandbox, MustNot: "leave a set-ID file or a device node on the host",
		Script: `cp /bin/busybox /data/suid; chmod 4755 /data/suid; cp /bin/busybox /data/sgid; chmod 2755 /data/sgid; mknod /data/sda b 8 0; mknod /data/mem c 1 1; ls -l /data`},
	{Name: "setid-exec", Group: "setid", MustNot: "gain anything on the host through a set-ID binary",
		Script: `cp /bin/busybox /tmp/su; chmod 4755 /tmp/su; ls -l /tmp/su; su -s /bin/sh nobody -c '/tmp/su id' </dev/null; chmod u+s /bin/busybox`},
	// A container's way out, to its sandbox (the container shares its
	// pids), and beyond.
	{Name: "container-nsenter", Group: "docker", Where: Docker, MustNot: "read host files from the sandbox a container escapes into",
		Script: `nsenter -t 1 -m -u -i -n -p sh -c 'hostname; cat $SECRET_FILE /proc/1/root$SECRET_FILE; ls $HOST_DIR; cat /proc/[0-9]*/cmdline | tr "\0" " "'; mkdir -p /tmp/hd && mount /dev/vda /tmp/hd; ls /sys/fs/cgroup`},
	// Last: it may end the sandbox.
	{Name: "reboot", Group: "reboot", MustNot: "reboot or halt the host",
		Script: `reboot -f; halt -f; poweroff -f; echo still here`},
}

// Select returns the probes meaningful where.
func Select(where Where) []Probe {
	var out []Probe
	for _, p := range Probes {
		if p.Where == Everywhere || p.Where == where {
			out = append(out, p)
		}
	}
	return out
}

// Exit statuses the script reports.
const (
	// TimedOutStatus is a probe's status when its deadline killed it
	// (SIGUSR1: nothing else sends that).
	TimedOutStatus = 128 + 10
)

// Script is the guest's sh script running probes in order, with busybox's
// applets in PATH. Each runs in
// its own shell under a deadline of timeout seconds with stdin from
// /dev/null, framed by "@@BEGIN NAME" and "@@END NAME STATUS". When sync is
// set, after each group it prints "@@GROUP NAME" and reads a line from
// stdin: the host compares itself meanwhile.
func Script(probes []Probe, timeout int, sync bool) string {
	var b strings.Builder
	b.WriteString(`run() { echo "@@BEGIN $1"; /bin/busybox timeout -s USR1 ` + fmt.Sprint(timeout) + ` /bin/sh -c "$2" </dev/null 2>&1; echo "@@END $1 $?"; }
`)
	for i, p := range probes {
		fmt.Fprintf(&b, "run %s %s\n", p.Name, quote(p.Script))
		if sync && (i == len(probes)-1 || probes[i+1].Group != p.Group) {
			fmt.Fprintf(&b, "echo \"@@GROUP %s\"; read ack\n", p.Group)
		}
	}
	b.WriteString("echo @@DONE\n")
	return b.String()
}

// quote makes s one single-quoted sh word.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
