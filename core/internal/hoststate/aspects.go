package hoststate

import (
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// processes lists the host's processes that were running before the
// caller started, but kernel threads: what a guest that got out could kill.
// Processes started since, the caller's own and other work on the machine,
// are left out; what a sandbox leaves running is for its test to check
// (its rungv's pids and the stubs' sessions, see proctree).
func processes() (string, error) {
	self, err := readStat(os.Getpid())
	if err != nil {
		return "", err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return "", err
	}
	var lines []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil || pid == 2 || st.ppid == 2 || st.start >= self.start {
			continue // gone, a kernel thread, or younger than the caller
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		lines = append(lines, fmt.Sprintf("%s %s\tpid %d", st.comm, exe, pid))
	}
	return sortedLines(lines), nil
}

type stat struct {
	comm  string
	ppid  int
	start uint64 // clock ticks after boot
}

// readStat reads /proc/pid/stat, whose comm (in parentheses) may hold
// spaces.
func readStat(pid int) (stat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, err
	}
	s := string(data)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return stat{}, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 20 {
		return stat{}, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	ppid, _ := strconv.Atoi(f[1])
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return stat{comm: s[open+1 : end], ppid: ppid, start: start}, nil
}

// listeners lists listening TCP sockets, bound unconnected UDP sockets and
// listening unix sockets with a name (a path not excluded, or an abstract
// name), in the caller's network namespace.
func listeners(excluded func(string) bool) (string, error) {
	var lines []string
	for _, f := range []struct {
		proto, file, state string
	}{
		{"tcp", "/proc/net/tcp", "0A"},
		{"tcp6", "/proc/net/tcp6", "0A"},
		{"udp", "/proc/net/udp", "07"},
		{"udp6", "/proc/net/udp6", "07"},
	} {
		data, err := os.ReadFile(f.file)
		if err != nil {
			if os.IsNotExist(err) {
				continue // no IPv6
			}
			return "", err
		}
		for _, l := range strings.Split(string(data), "\n")[1:] {
			fs := strings.Fields(l)
			if len(fs) < 4 || fs[3] != f.state {
				continue
			}
			lines = append(lines, f.proto+" "+hexAddr(fs[1]))
		}
	}
	data, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(data), "\n")[1:] {
		fs := strings.Fields(l)
		// Num RefCount Protocol Flags Type St Inode Path
		if len(fs) < 8 || fs[3] != "00010000" || excluded(fs[7]) {
			continue
		}
		lines = append(lines, "unix "+fs[7])
	}
	return sortedLines(lines), nil
}

// hexAddr decodes /proc/net/tcp's ADDR:PORT: the address as 32-bit words
// in host (little-endian) order, the port big-endian.
func hexAddr(s string) string {
	a, p, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(a)
	port, perr := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil || perr != nil || len(raw)%4 != 0 {
		return s
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	addr, ok := netip.AddrFromSlice(raw)
	if !ok {
		return s
	}
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)).String()
}

// fileRoots are the host directories whose files are compared, each to
// fileDepth levels below it: where a guest that got out would write.
func fileRoots() []string {
	roots := []string{"/etc", "/tmp", "/var/tmp", "/dev/shm", "/dev", "/run"}
	if home, err := os.UserHomeDir(); err == nil && home != "/" {
		roots = append(roots, home)
	}
	return roots
}

const fileDepth = 3

// files lists the files under fileRoots: regular files by mode, size and
// mtime, symbolic links by target, devices by number, directories by mode
// only (entries coming and going show as their own lines).
func files(excluded func(string) bool) (string, error) {
	var lines []string
	seen := map[string]bool{}
	for _, root := range fileRoots() {
		if seen[root] {
			continue
		}
		seen[root] = true
		base := strings.Count(filepath.Clean(root), "/")
		filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || excluded(path) || path == "/dev/pts" {
				if d != nil && d.IsDir() && path != root {
					return filepath.SkipDir
				}
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil // gone meanwhile
			}
			lines = append(lines, path+"\t"+describe(path, info))
			if d.IsDir() && strings.Count(path, "/")-base >= fileDepth {
				return filepath.SkipDir
			}
			return nil
		})
	}
	return sortedLines(lines), nil
}

func describe(path string, info fs.FileInfo) string {
	mode := info.Mode()
	st, _ := info.Sys().(*syscall.Stat_t)
	var perm, owner string
	if st != nil {
		// In octal, with the set-ID and sticky bits.
		perm, owner = fmt.Sprintf(" %04o", st.Mode&0o7777), fmt.Sprintf(" %d:%d", st.Uid, st.Gid)
	}
	switch {
	case mode.IsDir():
		return "dir" + perm + owner
	case mode&fs.ModeSymlink != 0:
		target, _ := os.Readlink(path)
		return "symlink" + owner + " -> " + target
	case mode&fs.ModeDevice != 0 && st != nil:
		kind := "block"
		if mode&fs.ModeCharDevice != 0 {
			kind = "char"
		}
		return fmt.Sprintf("%s device %d:%d%s%s", kind, unix.Major(st.Rdev), unix.Minor(st.Rdev), perm, owner)
	case mode&fs.ModeSocket != 0:
		return "socket" + perm + owner
	case mode&fs.ModeNamedPipe != 0:
		return "fifo" + perm + owner
	default:
		return fmt.Sprintf("file%s%s %d bytes, modified %s", perm, owner, info.Size(), info.ModTime().UTC().Format(time.RFC3339Nano))
	}
}

// modules lists the loaded kernel modules by name and size.
func modules() (string, error) {
	data, err := os.ReadFile("/proc/modules")
	if os.IsNotExist(err) {
		return "", nil // a kernel without modules
	}
	if err != nil {
		return "", err
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 {
			lines = append(lines, f[0]+"\t"+f[1]+" bytes")
		}
	}
	return sortedLines(lines), nil
}

// keys lists the keys the caller can see (/proc/keys: id, type,
// description) and each user's key count (/proc/key-users).
func keys() (string, error) {
	var lines []string
	if data, err := os.ReadFile("/proc/keys"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			// ID FLAGS USAGE TIMEOUT PERM UID GID TYPE DESCRIPTION: SUMMARY
			if f := strings.Fields(l); len(f) >= 9 {
				lines = append(lines, "key "+f[0]+" "+f[7]+" "+strings.Join(f[8:], " "))
			}
		}
	} else if !os.IsNotExist(err) {
		return "", err
	}
	if data, err := os.ReadFile("/proc/key-users"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			// UID: USAGE NKEYS/NIKEYS QNKEYS/MAXKEYS QNBYTES/MAXBYTES
			if f := strings.Fields(l); len(f) >= 5 {
				lines = append(lines, "key-user "+strings.TrimSuffix(f[0], ":")+"\tkeys "+f[2]+", quota "+f[3]+", bytes "+f[4])
			}
		}
	} else if !os.IsNotExist(err) {
		return "", err
	}
	return sortedLines(lines), nil
}

// swaps lists the swap areas in use.
func swaps() (string, error) {
	data, err := os.ReadFile("/proc/swaps")
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n")[1:] {
		if f := strings.Fields(l); len(f) >= 2 {
			lines = append(lines, f[0]+"\t"+f[1])
		}
	}
	return sortedLines(lines), nil
}

// sysctlNames are the kernel settings a guest would write to get out or to
// harm the host: its names, core dumps and module helpers, SysRq, panic
// behaviour, forwarding, and the knobs that guard bpf, perf and ptrace.
var sysctlNames = []string{
	"kernel/hostname", "kernel/domainname", "kernel/core_pattern", "kernel/core_uses_pid",
	"kernel/modprobe", "kernel/modules_disabled", "kernel/sysrq", "kernel/panic",
	"kernel/panic_on_oops", "kernel/printk", "kernel/randomize_va_space", "kernel/kptr_restrict",
	"kernel/dmesg_restrict", "kernel/unprivileged_bpf_disabled", "kernel/perf_event_paranoid",
	"kernel/yama/ptrace_scope", "kernel/pid_max", "kernel/threads-max", "kernel/shmmax",
	"kernel/ctrl-alt-del", "kernel/poweroff_cmd", "kernel/hotplug",
	"vm/overcommit_memory", "vm/swappiness", "vm/max_map_count", "vm/panic_on_oom",
	"fs/file-max", "fs/protected_symlinks", "fs/protected_hardlinks", "fs/suid_dumpable",
	"net/ipv4/ip_forward", "net/ipv4/ip_local_port_range", "net/ipv4/conf/all/rp_filter",
	"net/ipv6/conf/all/forwarding", "net/ipv6/conf/all/disable_ipv6", "net/core/somaxconn",
}

// sysctls reads sysctlNames; settings this kernel lacks are left out.
func sysctls() (string, error) {
	var lines []string
	for _, name := range sysctlNames {
		data, err := os.ReadFile("/proc/sys/" + name)
		if err != nil {
			continue
		}
		lines = append(lines, name+"\t"+strings.Join(strings.Fields(string(data)), " "))
	}
	return sortedLines(lines), nil
}

// clockOffset is the wall clock less the monotonic clock, in nanoseconds:
// constant while nobody sets the time (NTP's slewing moves it by
// microseconds), moved by a settimeofday.
func clockOffset() (string, error) {
	var real, mono unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return "", err
	}
	if err := unix.ClockGettime(unix.CLOCK_REALTIME, &real); err != nil {
		return "", err
	}
	return strconv.FormatInt(real.Nano()-mono.Nano(), 10), nil
}

// clockTolerance is how far the offset may drift between two snapshots.
const clockTolerance = 500 * time.Millisecond

// clockMoved compares two clockOffsets.
func clockMoved(before, after string) (Change, bool) {
	a, err1 := strconv.ParseInt(before, 10, 64)
	b, err2 := strconv.ParseInt(after, 10, 64)
	if err1 != nil || err2 != nil {
		return Change{Aspect: "clock", Sign: '+', Key: "offset", Line: "offset\tunreadable: " + before + " / " + after}, true
	}
	d := time.Duration(b - a)
	if d < clockTolerance && d > -clockTolerance {
		return Change{}, false
	}
	return Change{Aspect: "clock", Sign: '+', Key: "wall clock", Line: fmt.Sprintf("wall clock\tmoved by %v against the monotonic clock", d)}, true
}

func sortedLines(lines []string) string {
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
