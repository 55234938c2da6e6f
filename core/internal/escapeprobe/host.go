package escapeprobe

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Host holds what the probes aim at on the host: a secret file, a canary
// process, unix (path and abstract), TCP and UDP listeners on loopback,
// and the rungv binary. Check tells whether any was reached.
type Host struct {
	// Dir is the test's own directory; the secret file and the unix
	// listener are in it.
	Dir string
	// Marker is a word the probes write wherever they can (hostname,
	// keys, kernel log, file names); it must not show up on the host.
	Marker string

	secretFile, secret string
	secretMtime        int64
	canaryTag          string // in the canary's argv; the guest is not told it
	canary             *exec.Cmd
	canaryDone         chan struct{}
	rungv, rungvSum    string
	unixPath, abstract string
	listeners          []net.Listener
	udp                net.PacketConn
	reached            atomic.Int64
	mu                 sync.Mutex
	reachedBy          []string
}

// NewHost sets up the targets in dir (which the caller removes, and
// excludes from its host comparisons) for a sandbox run by the rungv
// binary at rungv. Close ends them.
func NewHost(dir, rungv string) (*Host, error) {
	h := &Host{Dir: dir, rungv: rungv, Marker: "m" + randomHex(6), canaryTag: "gvx-canary-" + randomHex(8),
		secret: "gvx-secret-" + randomHex(16), canaryDone: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			h.Close()
		}
	}()
	h.secretFile = filepath.Join(dir, "secret")
	if err := os.WriteFile(h.secretFile, []byte(h.secret+"\n"), 0o600); err != nil {
		return nil, err
	}
	st, err := os.Stat(h.secretFile)
	if err != nil {
		return nil, err
	}
	h.secretMtime = st.ModTime().UnixNano()
	if h.rungvSum, err = fileSum(rungv); err != nil {
		return nil, err
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return nil, err
	}
	// In a process group of its own: a guest reaching "kill -PGID" must
	// find it, not the test.
	h.canary = &exec.Cmd{Path: sleep, Args: []string{h.canaryTag, "3600"}, SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	if err := h.canary.Start(); err != nil {
		return nil, fmt.Errorf("starting the canary process: %w", err)
	}
	go func() { h.canary.Wait(); close(h.canaryDone) }()
	h.unixPath = filepath.Join(dir, "host.sock")
	h.abstract = "gvx-probe-" + h.Marker
	for _, a := range [][2]string{{"unix", h.unixPath}, {"unix", "@" + h.abstract}, {"tcp", "127.0.0.1:0"}, {"tcp", "[::1]:0"}} {
		l, err := net.Listen(a[0], a[1])
		if err != nil {
			if a[1] == "[::1]:0" {
				continue // no IPv6 loopback here
			}
			return nil, fmt.Errorf("listening on %s %s: %w", a[0], a[1], err)
		}
		h.listeners = append(h.listeners, l)
		go h.accept(l)
	}
	if h.udp, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := h.udp.ReadFrom(buf)
			if err != nil {
				return
			}
			h.reach(fmt.Sprintf("udp %s got %q from %s", h.udp.LocalAddr(), buf[:n], from))
		}
	}()
	ok = true
	return h, nil
}

func (h *Host) accept(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		h.reach(fmt.Sprintf("%s %s accepted a connection", l.Addr().Network(), l.Addr()))
		c.Close()
	}
}

func (h *Host) reach(what string) {
	h.reached.Add(1)
	h.mu.Lock()
	h.reachedBy = append(h.reachedBy, what)
	h.mu.Unlock()
}

// CanaryPid is the canary process's host pid.
func (h *Host) CanaryPid() int { return h.canary.Process.Pid }

// Env is what the guest is told, as NAME=VALUE.
func (h *Host) Env() []string {
	return []string{
		"SECRET_FILE=" + h.secretFile,
		"HOST_DIR=" + h.Dir,
		"MARKER=" + h.Marker,
		"CANARY_PID=" + strconv.Itoa(h.CanaryPid()),
		"TEST_PID=" + strconv.Itoa(os.Getpid()),
		"HOST_UNIX=" + h.unixPath,
		"HOST_ABSTRACT=" + h.abstract,
		"HOST_TCP=" + h.listeners[2].Addr().String(),
		"HOST_UDP=" + h.udp.LocalAddr().String(),
	}
}

// Check returns each target the guest reached, judging the host and the
// guest's output: the canary killed, stopped or traced; a listener
// reached; the secret file or the rungv binary read or changed; the
// marker in the host's names, keys or kernel log.
func (h *Host) Check(output string) []string {
	var bad []string
	select {
	case <-h.canaryDone:
		bad = append(bad, fmt.Sprintf("the host canary process %d ended: %v", h.CanaryPid(), h.canary.ProcessState))
	default:
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.CanaryPid()))
		if err != nil {
			bad = append(bad, fmt.Sprintf("the host canary process: %v", err))
		}
		for _, l := range strings.Split(string(status), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && ((f[0] == "State:" && f[1] != "S" && f[1] != "R") || (f[0] == "TracerPid:" && f[1] != "0")) {
				bad = append(bad, "the host canary process: "+l)
			}
		}
	}
	h.mu.Lock()
	bad = append(bad, h.reachedBy...)
	h.mu.Unlock()
	if data, err := os.ReadFile(h.secretFile); err != nil || string(data) != h.secret+"\n" {
		bad = append(bad, fmt.Sprintf("the host secret file changed: %q %v", data, err))
	}
	if st, err := os.Stat(h.secretFile); err == nil && st.ModTime().UnixNano() != h.secretMtime {
		bad = append(bad, "the host secret file's mtime changed")
	}
	if sum, err := fileSum(h.rungv); err != nil || sum != h.rungvSum {
		bad = append(bad, fmt.Sprintf("the rungv binary changed: %s %v", sum, err))
	}
	for what, s := range map[string]string{"the host's secret": h.secret, "the host canary's argv": h.canaryTag, "the rungv binary's sha256": h.rungvSum} {
		if strings.Contains(output, s) {
			bad = append(bad, "the guest's output holds "+what)
		}
	}
	for _, f := range []string{"/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname", "/proc/keys", "/proc/sys/kernel/core_pattern"} {
		if data, err := os.ReadFile(f); err == nil && strings.Contains(string(data), h.Marker) {
			bad = append(bad, fmt.Sprintf("the host's %s holds the marker: %q", f, data))
		}
	}
	if log, err := kernelLog(); err == nil && strings.Contains(log, h.Marker) {
		bad = append(bad, "the host's kernel log holds the marker")
	}
	return bad
}

// Close ends the canary and the listeners.
func (h *Host) Close() {
	if h.canary != nil && h.canary.Process != nil {
		h.canary.Process.Kill()
		<-h.canaryDone
	}
	for _, l := range h.listeners {
		l.Close()
	}
	if h.udp != nil {
		h.udp.Close()
	}
}

// kernelLog reads the host's kernel log buffer without waiting.
func kernelLog() (string, error) {
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var b bytes.Buffer
	buf := make([]byte, 8192)
	for b.Len() < 16<<20 {
		n, err := unix.Read(fd, buf)
		if err == syscall.EPIPE {
			continue // overwritten while reading
		}
		if err != nil || n <= 0 {
			break
		}
		b.Write(buf[:n])
	}
	return b.String(), nil
}

func fileSum(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
