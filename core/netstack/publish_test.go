package netstack

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// guestEcho serves TCP on the guest's 127.0.0.1:port: it answers with
// prefix and then echoes until the client half-closes.
func guestEcho(t testing.TB, g *stack.Stack, port uint16, prefix string) {
	t.Helper()
	guestEchoOn(t, g, guestLoopback, port, prefix)
}

// guestEchoOn is guestEcho on another guest address.
func guestEchoOn(t testing.TB, g *stack.Stack, addr tcpip.Address, port uint16, prefix string) {
	t.Helper()
	l, err := gonet.ListenTCP(g, tcpip.FullAddress{Addr: addr, Port: port}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, prefix)
				io.Copy(c, c)
				c.(*gonet.TCPConn).CloseWrite()
			}()
		}
	}()
}

// guestUDPEcho answers datagrams on the guest's 127.0.0.1:port.
func guestUDPEcho(t testing.TB, g *stack.Stack, port uint16) {
	t.Helper()
	laddr := tcpip.FullAddress{Addr: guestLoopback, Port: port}
	c, err := gonet.DialUDP(g, &laddr, nil, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(append([]byte("guest:"), buf[:n]...), from)
		}
	}()
}

func TestPublishReachesGuestPorts(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "docker.sock")
	for _, mode := range []Mode{ModeNone, ModeNAT} {
		t.Run(string(mode), func(t *testing.T) {
			os.Remove(sock)
			n, g := attach(t, Config{Mode: mode, Publish: []Publish{
				{HostPath: sock, GuestPort: 2375},
				{HostAddr: netip.MustParseAddrPort("127.0.0.1:0"), GuestPort: 8080},
				{HostAddr: netip.MustParseAddrPort("127.0.0.1:0"), Protocol: UDP, GuestPort: 5353},
			}})
			guestEcho(t, g, 2375, "docker:")
			guestEcho(t, g, 8080, "web:")
			guestUDPEcho(t, g, 5353)
			pubs := n.Published()
			if pubs[1].HostAddr.Port() == 0 || pubs[2].HostAddr.Port() == 0 {
				t.Fatalf("Published does not report the chosen ports: %v", pubs)
			}
			if st, err := os.Stat(sock); err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
				t.Fatalf("the unix socket: %v %v, want a socket with mode 0600", st.Mode(), err)
			}
			if got := n.SocketPaths(); len(got) != 1 || got[0] != sock {
				t.Fatalf("SocketPaths: %v", got)
			}

			for _, c := range []struct{ network, addr, want string }{
				{"unix", sock, "docker:"},
				{"tcp", pubs[1].HostAddr.String(), "web:"},
			} {
				conn, err := net.Dial(c.network, c.addr)
				if err != nil {
					t.Fatal(err)
				}
				if got := exchange(t, conn.(stream), "hi"); got != c.want+"hi" {
					t.Errorf("%s %s: %q", c.network, c.addr, got)
				}
			}
			u, err := net.Dial("udp", pubs[2].HostAddr.String())
			if err != nil {
				t.Fatal(err)
			}
			defer u.Close()
			for i := range 2 {
				u.Write([]byte("dgram"))
				u.SetReadDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 100)
				k, err := u.Read(buf)
				if err != nil || string(buf[:k]) != "guest:dgram" {
					t.Fatalf("UDP datagram %d: %q %v", i, buf[:k], err)
				}
			}
		})
	}
}

func TestPublishReachesServicesBoundToEth0(t *testing.T) {
	n, g := attach(t, Config{Mode: ModeNAT, Publish: []Publish{{HostAddr: netip.MustParseAddrPort("127.0.0.1:0"), GuestPort: 8081}}})
	guestEchoOn(t, g, tcpipAddr(GuestAddr), 8081, "eth0:")
	c, err := net.Dial("tcp", n.Published()[0].HostAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	if got := exchange(t, c.(stream), "hi"); got != "eth0:hi" {
		t.Fatalf("a guest service on %s only: %q", GuestAddr, got)
	}
}

func TestPublishWithoutGuestServiceClosesTheConnection(t *testing.T) {
	n, _ := attach(t, Config{Publish: []Publish{{HostAddr: netip.MustParseAddrPort("127.0.0.1:0"), GuestPort: 9999}}})
	c, err := net.Dial("tcp", n.Published()[0].HostAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(c); len(b) != 0 || err != nil && strings.Contains(err.Error(), "timeout") {
		t.Fatalf("read %q %v, want the connection closed at once", b, err)
	}
}

func TestPublishLargeTransfer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	_, g := attach(t, Config{Publish: []Publish{{HostPath: sock, GuestPort: 7000}}})
	guestEcho(t, g, 7000, "")
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB
	go func() {
		c.Write(payload)
		c.(*net.UnixConn).CloseWrite()
	}()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("16 MiB echoed through a unix publish: %d bytes, equal %v, %v", len(got), bytes.Equal(got, payload), err)
	}
}

func TestPublishRefusesAnExistingPath(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "taken")
	os.WriteFile(sock, nil, 0o600)
	_, err := New(Config{Publish: []Publish{{HostPath: sock, GuestPort: 1}}})
	if err == nil || !strings.Contains(err.Error(), "remove it or pick another") {
		t.Fatalf("New over an existing path: %v", err)
	}
	// A failed New leaves no socket behind.
	sock2 := filepath.Join(t.TempDir(), "ok")
	_, err = New(Config{Publish: []Publish{
		{HostPath: sock2, GuestPort: 1},
		{HostPath: sock, GuestPort: 2},
	}})
	if err == nil {
		t.Fatal("New succeeded")
	}
	if _, err := os.Lstat(sock2); !os.IsNotExist(err) {
		t.Fatalf("the first socket survived a failed New: %v", err)
	}
}

// TestDrainDeliversWhatTheGuestWroteLast: a guest service that writes and
// exits at once, and a sandbox torn down right after (rungv does
// Drain, then destroys the guest's stack). The host client never
// half-closes, so the relay must end on the guest's EOF alone.
func TestDrainDeliversWhatTheGuestWroteLast(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	n, g := attach(t, Config{Publish: []Publish{{HostPath: sock, GuestPort: 7001}}})
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	l, err := gonet.ListenTCP(g, tcpip.FullAddress{Addr: guestLoopback, Port: 7001}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := l.Accept()
		l.Close()
		if err != nil {
			return
		}
		c.Write(payload)
		c.Close()
	}()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	type result struct {
		got []byte
		err error
	}
	read := make(chan result, 1)
	go func() {
		got, err := io.ReadAll(c)
		read <- result{got, err}
	}()
	<-served
	n.Drain(time.Minute)
	if open := n.flows.count(); open != 0 {
		t.Errorf("Drain returned with %d relays and listeners still open: it timed out instead of ending on the guest's EOF", open)
	}
	g.Close() // what sentry.Sandbox.Close does to the guest's stack
	r := <-read
	if r.err != nil || !bytes.Equal(r.got, payload) {
		t.Fatalf("after Drain and the guest stack's end, the host read %d of %d bytes, %v", len(r.got), len(payload), r.err)
	}
	if _, err := net.Dial("unix", sock); err == nil {
		t.Error("the published socket still accepts after Drain")
	}
}

// TestSuspendBeforeAttachHoldsPortsUntilResume: a network suspended before
// it is attached (a restore) accepts a client's connection but relays
// nothing into the guest until Resume; the connection is then served, not
// lost.
func TestSuspendBeforeAttachHoldsPortsUntilResume(t *testing.T) {
	n, err := New(Config{Logf: t.Logf, Publish: []Publish{{HostAddr: netip.MustParseAddrPort("127.0.0.1:0"), GuestPort: 2375}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	n.Suspend()
	g := newGuestStack(t)
	if err := n.Attach(g); err != nil {
		t.Fatal(err)
	}
	guestEcho(t, g, 2375, "ready:")
	c, err := net.Dial("tcp", n.Published()[0].HostAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if b, err := c.Read(make([]byte, 10)); err == nil {
		t.Fatalf("a held port relayed %d bytes before Resume", b)
	}
	n.Resume()
	c.SetReadDeadline(time.Time{})
	if got := exchange(t, c.(stream), "hi"); got != "ready:hi" {
		t.Fatalf("after Resume: %q", got)
	}
}

// TestSuspendEndsRelaysAndHoldsNewOnes: Suspend closes the connection in
// progress (its relay lets go of the guest socket) and holds a new one
// until Resume, which then reaches the guest.
func TestSuspendEndsRelaysAndHoldsNewOnes(t *testing.T) {
	n, g := attach(t, Config{Publish: []Publish{{HostAddr: netip.MustParseAddrPort("127.0.0.1:0"), GuestPort: 2375}}})
	guestEcho(t, g, 2375, "g:")
	addr := n.Published()[0].HostAddr.String()
	old, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	buf := make([]byte, 2)
	if _, err := io.ReadFull(old, buf); err != nil || string(buf) != "g:" {
		t.Fatalf("before Suspend: %q %v", buf, err)
	}
	n.Suspend()
	if open := n.flows.count(); open != 1 {
		t.Errorf("after Suspend %d closers are registered; want only the port's listener", open)
	}
	old.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := old.Read(buf); err == nil {
		t.Error("the connection in progress survived Suspend")
	}
	held, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if k, err := held.Read(buf); err == nil {
		t.Fatalf("a connection made while suspended was relayed (%d bytes)", k)
	}
	n.Resume()
	held.SetReadDeadline(time.Time{})
	if got := exchange(t, held.(stream), "hi"); got != "g:hi" {
		t.Fatalf("after Resume: %q", got)
	}
}
