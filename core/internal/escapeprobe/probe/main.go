// Command probe makes, as guest root, the system calls the escape probes
// need and busybox lacks: kernel interfaces, handles, ptrace, sockets to
// host paths, the clock. It prints one line per call, "CALL: ok" or
// "CALL: ERRNO"; the test judges the host, not these lines.
//
// Usage: probe GROUP [ARG...]
package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe GROUP [ARG...]")
		os.Exit(2)
	}
	f, ok := groups[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "probe: no group %q\n", os.Args[1])
		os.Exit(2)
	}
	f(os.Args[2:])
}

// report prints a call's outcome.
func report(call string, err error) {
	if err == nil {
		fmt.Printf("%s: ok\n", call)
		return
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		fmt.Printf("%s: %s (%s)\n", call, unix.ErrnoName(errno), errno)
		return
	}
	fmt.Printf("%s: %v\n", call, err)
}

func raw(trap uintptr, a ...uintptr) error {
	var args [6]uintptr
	copy(args[:], a)
	_, _, e := unix.Syscall6(trap, args[0], args[1], args[2], args[3], args[4], args[5])
	if e != 0 {
		return e
	}
	return nil
}

var groups = map[string]func(args []string){
	// modules: load, insert from a file, remove.
	"modules": func([]string) {
		elf := []byte("\x7fELF\x02\x01\x01\x00")
		report("init_module", unix.InitModule(elf, ""))
		if f, err := os.Open("/proc/self/exe"); err == nil {
			report("finit_module", unix.FinitModule(int(f.Fd()), "", 0))
			f.Close()
		}
		report("delete_module ext4", unix.DeleteModule("ext4", unix.O_NONBLOCK))
		report("kexec_load", raw(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0))
		report("kexec_file_load", raw(unix.SYS_KEXEC_FILE_LOAD, ^uintptr(0), ^uintptr(0), 0, 0, 0))
	},
	// bpf: a map and a socket filter program.
	"bpf": func([]string) {
		attr := [5]uint32{unix.BPF_MAP_TYPE_HASH, 4, 4, 1, 0}
		report("bpf map_create", raw(unix.SYS_BPF, unix.BPF_MAP_CREATE, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr)))
		// r0 = 0; exit
		insns := [2]uint64{0xb7, 0x95}
		license := []byte("GPL\x00")
		var prog [48]byte
		*(*uint32)(unsafe.Pointer(&prog[0])) = unix.BPF_PROG_TYPE_SOCKET_FILTER
		*(*uint32)(unsafe.Pointer(&prog[4])) = 2
		*(*uint64)(unsafe.Pointer(&prog[8])) = uint64(uintptr(unsafe.Pointer(&insns)))
		*(*uint64)(unsafe.Pointer(&prog[16])) = uint64(uintptr(unsafe.Pointer(&license[0])))
		report("bpf prog_load", raw(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(&prog)), unsafe.Sizeof(prog)))
	},
	// perf: system-wide and kernel-tracing events.
	"perf": func([]string) {
		for _, ev := range []struct {
			name string
			attr unix.PerfEventAttr
			pid  int
		}{
			{"cpu-clock all processes", unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}, -1},
			{"cycles self", unix.PerfEventAttr{Type: unix.PERF_TYPE_HARDWARE, Config: unix.PERF_COUNT_HW_CPU_CYCLES}, 0},
			{"tracepoint", unix.PerfEventAttr{Type: unix.PERF_TYPE_TRACEPOINT, Config: 1}, -1},
		} {
			ev.attr.Size = uint32(unsafe.Sizeof(ev.attr))
			fd, err := unix.PerfEventOpen(&ev.attr, ev.pid, 0, -1, 0)
			if err == nil {
				unix.Close(fd)
			}
			report("perf_event_open "+ev.name, err)
		}
	},
	// keys: ARG is the description, which must not appear on the host.
	"keys": func(args []string) {
		desc := "gvx-probe"
		if len(args) > 0 {
			desc = args[0]
		}
		for _, kr := range []struct {
			name string
			id   int
		}{{"session", unix.KEY_SPEC_SESSION_KEYRING}, {"user", unix.KEY_SPEC_USER_KEYRING}, {"process", unix.KEY_SPEC_PROCESS_KEYRING}} {
			_, err := unix.AddKey("user", desc, []byte("escaped"), kr.id)
			report("add_key "+kr.name, err)
		}
		_, err := unix.KeyctlJoinSessionKeyring(desc)
		report("keyctl join_session_keyring", err)
		_, err = unix.RequestKey("user", desc, "", unix.KEY_SPEC_SESSION_KEYRING)
		report("request_key", err)
	},
	// uring: io_uring_setup, userfaultfd, memfd_secret.
	"uring": func([]string) {
		var params [120]byte
		r1, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params)), 0)
		if e == 0 {
			unix.Close(int(r1))
			report("io_uring_setup", nil)
		} else {
			report("io_uring_setup", e)
		}
		for _, flags := range []uintptr{0, unix.O_CLOEXEC | unix.O_NONBLOCK} {
			r1, _, e = unix.Syscall(unix.SYS_USERFAULTFD, flags, 0, 0)
			if e == 0 {
				unix.Close(int(r1))
				report("userfaultfd "+strconv.Itoa(int(flags)), nil)
			} else {
				report("userfaultfd "+strconv.Itoa(int(flags)), e)
			}
		}
		report("iopl 3", raw(unix.SYS_IOPL, 3))
		report("ioperm 0x80", raw(unix.SYS_IOPERM, 0x80, 1, 1))
		report("acct", unix.Acct("/tmp/acct"))
	},
	// handles: open_by_handle_at with guessed handles (the "shocker"
	// escape): ext4 and xfs inode numbers of a host root.
	"handles": func([]string) {
		h, mount, err := unix.NameToHandleAt(unix.AT_FDCWD, "/", 0)
		report("name_to_handle_at /", err)
		mfd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			report("open /", err)
			return
		}
		defer unix.Close(mfd)
		_ = mount
		for _, ino := range []uint32{2, 128, 256} {
			b := make([]byte, 8)
			*(*uint32)(unsafe.Pointer(&b[0])) = ino
			guess := unix.NewFileHandle(1, b)
			fd, err := unix.OpenByHandleAt(mfd, guess, unix.O_RDONLY)
			if err == nil {
				unix.Close(fd)
			}
			report("open_by_handle_at ino "+strconv.Itoa(int(ino)), err)
		}
		if err == nil {
			fd, err := unix.OpenByHandleAt(mfd, h, unix.O_RDONLY)
			if err == nil {
				unix.Close(fd)
			}
			report("open_by_handle_at own handle", err)
		}
	},
	// ptrace: ARGs are pids to attach to (host pids the test passes in, and
	// a guest child).
	"ptrace": func(args []string) {
		for _, a := range args {
			pid, err := strconv.Atoi(a)
			if err != nil {
				continue
			}
			err = unix.PtraceAttach(pid)
			if err == nil {
				// Detach only from the attach's stop: a tracer that
				// exits first leaves its tracee stopped.
				var ws unix.WaitStatus
				unix.Wait4(pid, &ws, unix.WALL, nil)
				unix.PtraceDetach(pid)
			}
			report("ptrace attach "+a, err)
			report("process_vm_readv "+a, readv(pid))
		}
	},
	// clock: set, step and slew the wall clock.
	"clock": func([]string) {
		report("settimeofday 2001", unix.Settimeofday(&unix.Timeval{Sec: 978307200}))
		ts := unix.NsecToTimespec(time.Now().Add(-48 * time.Hour).UnixNano())
		report("clock_settime realtime -48h", unix.ClockSettime(unix.CLOCK_REALTIME, &ts))
		tx := unix.Timex{Modes: unix.ADJ_SETOFFSET, Time: unix.Timeval{Sec: -3600}}
		_, err := unix.Adjtimex(&tx)
		report("adjtimex setoffset -1h", err)
		tx = unix.Timex{Modes: unix.ADJ_FREQUENCY, Freq: 500 << 16}
		_, err = unix.Adjtimex(&tx)
		report("adjtimex frequency", err)
		report("clock_adjtime", raw(unix.SYS_CLOCK_ADJTIME, unix.CLOCK_REALTIME, uintptr(unsafe.Pointer(&tx))))
	},
	// names: ARG is the name to set.
	"names": func(args []string) {
		name := "gvx-probe"
		if len(args) > 0 {
			name = args[0]
		}
		report("sethostname", unix.Sethostname([]byte(name)))
		report("setdomainname", unix.Setdomainname([]byte(name)))
	},
	// system: reboot's harmless commands, swapon, sysrq, quotas.
	"system": func([]string) {
		report("reboot cad_off", unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF))
		report("reboot cad_on", unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_ON))
		if p, err := unix.BytePtrFromString("/tmp/swapfile"); err == nil {
			report("swapon /tmp/swapfile", raw(unix.SYS_SWAPON, uintptr(unsafe.Pointer(p)), 0))
		}
		report("syslog read_clear", raw(unix.SYS_SYSLOG, 5, 0, 0))
		report("vhangup", raw(unix.SYS_VHANGUP))
		report("unshare user|mount|net|pid", unix.Unshare(unix.CLONE_NEWUSER|unix.CLONE_NEWNS|unix.CLONE_NEWNET|unix.CLONE_NEWPID))
		report("setns /proc/1/ns/mnt", setns("/proc/1/ns/mnt"))
	},
	// sockets: raw, packet and netlink sockets, and vsock creation.
	"sockets": func([]string) {
		for _, s := range []struct {
			name        string
			domain, typ int
			proto       int
		}{
			{"packet raw", unix.AF_PACKET, unix.SOCK_RAW, 0x0300},
			{"inet raw tcp", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP},
			{"inet6 raw", unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_RAW},
			{"netlink route", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE},
			{"netlink audit", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT},
			{"netlink kobject_uevent", unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_KOBJECT_UEVENT},
			{"netlink netfilter", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER},
			{"vsock", unix.AF_VSOCK, unix.SOCK_STREAM, 0},
			{"bluetooth", unix.AF_BLUETOOTH, unix.SOCK_RAW, 0},
			{"alg", unix.AF_ALG, unix.SOCK_SEQPACKET, 0},
		} {
			fd, err := unix.Socket(s.domain, s.typ, s.proto)
			if err == nil {
				if s.domain == unix.AF_NETLINK && s.proto == unix.NETLINK_KOBJECT_UEVENT {
					err = unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1})
				}
				unix.Close(fd)
			}
			report("socket "+s.name, err)
		}
	},
	// dial: ARGs are NETWORK=ADDRESS pairs the host listens on; each
	// connection must fail.
	"dial": func(args []string) {
		for _, a := range args {
			network, addr, ok := cut(a, '=')
			if !ok {
				continue
			}
			c, err := net.DialTimeout(network, addr, 2*time.Second)
			if err == nil {
				c.Write([]byte("escaped\n"))
				c.Close()
			}
			report("connect "+a, err)
		}
	},
	// chroot: the classic escape, chroot into a subdirectory while
	// holding a directory outside it, then climb; prints what / holds.
	"chroot": func(args []string) {
		os.MkdirAll("/tmp/jail", 0o755)
		out, err := os.Open("/")
		if err != nil {
			report("open /", err)
			return
		}
		report("chroot /tmp/jail", unix.Chroot("/tmp/jail"))
		report("fchdir outside", unix.Fchdir(int(out.Fd())))
		for i := 0; i < 64; i++ {
			unix.Chdir("..")
		}
		report("chroot .", unix.Chroot("."))
		for _, p := range args {
			data, err := os.ReadFile(p)
			if err == nil {
				fmt.Printf("read %s: %q\n", p, data)
			}
			report("read "+p, err)
		}
		entries, _ := os.ReadDir("/")
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		fmt.Printf("/ holds %v\n", names)
	},
	// kvm: the KVM API on a device node the script made.
	"kvm": func(args []string) {
		for _, p := range args {
			fd, err := unix.Open(p, unix.O_RDWR, 0)
			if err != nil {
				report("open "+p, err)
				continue
			}
			v, err := unix.IoctlRetInt(fd, 0xAE00) // KVM_GET_API_VERSION
			report(fmt.Sprintf("ioctl KVM_GET_API_VERSION %s = %d", p, v), err)
			vm, err := unix.IoctlRetInt(fd, 0xAE01) // KVM_CREATE_VM
			if err == nil {
				unix.Close(vm)
			}
			report("ioctl KVM_CREATE_VM "+p, err)
			unix.Close(fd)
		}
	},
}

func readv(pid int) error {
	buf := make([]byte, 8)
	local := []unix.Iovec{{Base: &buf[0], Len: 8}}
	remote := []unix.RemoteIovec{{Base: 0x400000, Len: 8}}
	_, err := unix.ProcessVMReadv(pid, local, remote, 0)
	return err
}

func setns(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Setns(fd, 0)
}

func cut(s string, sep byte) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
