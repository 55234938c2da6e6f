package lockdown

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/sentry/platform"
)

// netDirEnv names the directory a net helper puts its unix socket in.
const netDirEnv = "GVX_LOCKDOWN_TEST_DIR"

// startNetHelper starts a net helper with a directory for its socket.
func startNetHelper(t *testing.T, mode string) *helper {
	t.Setenv(netDirEnv, t.TempDir())
	return startHelper(t, mode)
}

// netListeners are the sockets a net helper opens before lockdown, as
// rungv opens published ports.
type netListeners struct {
	tcp  *net.TCPListener
	udp  *net.UDPConn
	unix *net.UnixListener
}

func openNetListeners() (*netListeners, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	l, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	// The test's temporary directory: a locked helper cannot unlink.
	path := filepath.Join(os.Getenv(netDirEnv), "s")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ul.SetUnlinkOnClose(false)
	return &netListeners{tcp: l.(*net.TCPListener), udp: u, unix: ul}, nil
}

// runNetHelper locks down at the level the mode names, then uses host
// sockets as gvx's NAT and published ports do ("net-nat", "net-publish") or
// makes a call the level forbids ("net-*-forbidden-*").
func runNetHelper(mode string) int {
	ls, err := openNetListeners()
	if err != nil {
		fmt.Fprintln(os.Stderr, "listeners:", err)
		return 3
	}
	level := NetNAT
	if strings.HasPrefix(mode, "net-publish") {
		level = NetPublish
	}
	if err := Install(Options{Net: level, TrapViolations: os.Getenv("GVX_LOCKDOWN_TEST_TRAP") != ""}); err != nil {
		fmt.Fprintln(os.Stderr, "lockdown:", err)
		return 3
	}
	os.Stdout.WriteString("locked\n")
	bufio.NewReader(os.Stdin).ReadString('\n')
	switch mode {
	case "net-nat":
		err = natTraffic(ls)
	case "net-publish":
		err = publishTraffic(ls)
	case "net-publish-forbidden-socket":
		unix.RawSyscall(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	case "net-nat-forbidden-netlink":
		unix.RawSyscall(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	case "net-nat-forbidden-packet":
		unix.RawSyscall(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	case "net-nat-forbidden-unix":
		unix.RawSyscall(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	case "net-nat-forbidden-raw":
		unix.RawSyscall(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
	case "net-nat-forbidden-listen":
		unix.RawSyscall(unix.SYS_LISTEN, 0, 1, 0)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		return 4
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, mode+":", err)
		return 1
	}
	os.Stdout.WriteString("survived\n")
	return 0
}

// publishTraffic serves one connection on each stream listener and one
// datagram on the UDP socket; the test process is the client.
func publishTraffic(ls *netListeners) error {
	for _, l := range []net.Listener{ls.tcp, ls.unix} {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		if err := echoOnce(c); err != nil {
			return err
		}
	}
	buf := make([]byte, 100)
	n, peer, err := ls.udp.ReadFromUDPAddrPort(buf)
	if err != nil {
		return err
	}
	_, err = ls.udp.WriteToUDPAddrPort(buf[:n], peer)
	return err
}

// echoOnce reads one line from c, writes it back and closes c.
func echoOnce(c net.Conn) error {
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if _, err := io.WriteString(c, line); err != nil {
		return err
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// natTraffic dials TCP and UDP over IPv4 and IPv6 as the NAT does, to the
// helper's own listeners, and relays through them.
func natTraffic(ls *netListeners) error {
	go func() {
		for {
			c, err := ls.tcp.Accept()
			if err != nil {
				return
			}
			go echoOnce(c)
		}
	}()
	d := net.Dialer{KeepAlive: -1, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp4", ls.tcp.Addr().String())
	if err != nil {
		return err
	}
	if _, err := io.WriteString(c, "tcp\n"); err != nil {
		return err
	}
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(got) != "tcp\n" {
		return fmt.Errorf("tcp echo: %q %v", got, err)
	}
	u, err := d.Dial("udp4", ls.udp.LocalAddr().String())
	if err != nil {
		return err
	}
	if _, err := u.Write([]byte("udp")); err != nil {
		return err
	}
	buf := make([]byte, 10)
	n, peer, err := ls.udp.ReadFromUDPAddrPort(buf)
	if err != nil {
		return err
	}
	if _, err := ls.udp.WriteToUDPAddrPort(buf[:n], peer); err != nil {
		return err
	}
	u.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err = u.Read(buf); err != nil || string(buf[:n]) != "udp" {
		return fmt.Errorf("udp echo: %q %v", buf[:n], err)
	}
	u.Close()
	// IPv6 sockets: the host may have no IPv6 loopback; only the calls
	// matter, not whether the connection succeeds.
	if c6, err := d.Dial("udp6", "[::1]:9"); err == nil {
		c6.Close()
	}
	if c6, err := d.Dial("tcp6", "[::1]:9"); err == nil {
		c6.Close()
	}
	return nil
}

func TestNetNATAllowsDialingAndRelaying(t *testing.T) {
	h := startNetHelper(t, "net-nat")
	out, ps := h.proceed(t)
	if !ps.Success() || out != "survived\n" {
		t.Fatalf("NetNAT helper: %v output %q stderr %q; rerun with GVX_LOCKDOWN_TEST_TRAP=1 to see the call", ps, out, h.stderr.String())
	}
}

func TestNetPublishAllowsAcceptingAndRelaying(t *testing.T) {
	h := startNetHelper(t, "net-publish")
	tcpAddr, unixAddr, udpAddr := helperAddrs(t, h.cmd.Process.Pid)
	io.WriteString(h.stdin, "go\n")
	for _, a := range []struct{ network, addr string }{{"tcp", tcpAddr}, {"unix", unixAddr}} {
		c, err := net.Dial(a.network, a.addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, a.network+"\n")
		got, _ := io.ReadAll(c)
		c.Close()
		if string(got) != a.network+"\n" {
			t.Errorf("%s echo through the locked helper: %q", a.network, got)
		}
	}
	u, err := net.Dial("udp", udpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.Write([]byte("udp"))
	u.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 10)
	if n, err := u.Read(buf); err != nil || string(buf[:n]) != "udp" {
		t.Errorf("udp echo through the locked helper: %q %v", buf[:n], err)
	}
	h.stdin.Close()
	rest, _ := io.ReadAll(h.stdout)
	h.cmd.Wait()
	if !h.cmd.ProcessState.Success() || string(rest) != "survived\n" {
		t.Fatalf("NetPublish helper: %v output %q stderr %q", h.cmd.ProcessState, rest, h.stderr.String())
	}
}

// helperAddrs finds the helper's listening sockets in /proc: its TCP and
// UDP ports on 127.0.0.1 and its unix socket's path.
func helperAddrs(t *testing.T, pid int) (tcpAddr, unixAddr, udpAddr string) {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(target, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	scan := func(file string, state string) string {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !inodes[f[9]] || f[3] != state {
				continue
			}
			var port int
			fmt.Sscanf(f[1][strings.IndexByte(f[1], ':')+1:], "%X", &port)
			return fmt.Sprintf("127.0.0.1:%d", port)
		}
		t.Fatalf("no socket of the helper in /proc/%d/net/%s", pid, file)
		return ""
	}
	tcpAddr = scan("tcp", "0A") // LISTEN
	udpAddr = scan("udp", "07") // unconnected
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 8 && inodes[f[6]] {
			unixAddr = f[7]
		}
	}
	if unixAddr == "" {
		t.Fatal("no unix socket of the helper found")
	}
	return tcpAddr, unixAddr, udpAddr
}

func TestNetRulesDenyOtherSockets(t *testing.T) {
	for _, mode := range []string{
		"net-publish-forbidden-socket", // publishing creates no socket
		"net-nat-forbidden-netlink",
		"net-nat-forbidden-packet",
		"net-nat-forbidden-unix",
		"net-nat-forbidden-raw",
		"net-nat-forbidden-listen",
	} {
		t.Run(mode, func(t *testing.T) {
			h := startNetHelper(t, mode)
			out, ps := h.proceed(t)
			ws := ps.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
				t.Fatalf("helper ended with %v (output %q, stderr %q), want death by SIGSYS", ps, out, h.stderr.String())
			}
		})
	}
}

func TestNetAccessIsValidated(t *testing.T) {
	if _, err := Prepare(Options{Net: NetAccess(7)}); err == nil || !strings.Contains(err.Error(), "NetNAT") {
		t.Fatalf("Prepare with an unknown Net level: %v, want an error naming the levels", err)
	}
}

func TestNetAccessLevelsArePrecompiled(t *testing.T) {
	ctor, err := platform.Lookup("systrap")
	if err != nil {
		t.Fatal(err)
	}
	for _, net := range []NetAccess{NetPublish, NetNAT} {
		for _, control := range []int{0, 9} {
			f, err := Prepare(Options{Platform: ctor.PrecompiledSeccompInfo()[0], Net: net, ControlFD: control})
			if err != nil || !f.Precompiled() {
				t.Errorf("Net %s, control %d: precompiled %v, %v; run `go test ./core/lockdown -run TestPrecompiled -update`", net, control, f != nil && f.Precompiled(), err)
			}
		}
	}
}
