package netstack

import (
	"bytes"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/netstack/netstacktest"
)

func TestNATReachesHostLoopbackThroughTheGateway(t *testing.T) {
	echo := netstacktest.TCPEcho(t, "host:")
	_, g := attach(t, Config{Mode: ModeNAT, HostLoopback: true})
	for i := range 3 {
		c, err := dialGuest(t, g, gateway(echo.Port()))
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if got := exchange(t, c, "ping"); got != "host:ping" {
			t.Fatalf("connection %d: got %q", i, got)
		}
	}
}

func TestNATRefusesPromptly(t *testing.T) {
	echo := netstacktest.TCPEcho(t, "host:")
	other := netstacktest.TCPEcho(t, "other:")
	cases := []struct {
		name string
		cfg  Config
		dst  netip.AddrPort
	}{
		{"gateway without host loopback", Config{Mode: ModeNAT}, gateway(echo.Port())},
		{"not on the allowlist", Config{Mode: ModeNAT, HostLoopback: true, Allow: []AllowRule{{Prefix: netip.MustParsePrefix("10.0.2.2/32"), Port: other.Port()}}}, gateway(echo.Port())},
		{"another host of the subnet", Config{Mode: ModeNAT, HostLoopback: true}, netip.MustParseAddrPort("10.0.2.3:80")},
		{"a port nothing listens on", Config{Mode: ModeNAT, HostLoopback: true}, gateway(netstacktest.FreePort(t))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, g := attach(t, c.cfg)
			start := time.Now()
			conn, err := dialGuest(t, g, c.dst)
			if err == nil {
				conn.Close()
				t.Fatalf("connecting to %s succeeded", c.dst)
			}
			if !refused(err) {
				t.Fatalf("connecting to %s: %v, want a refused connection (RST)", c.dst, err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("refusal took %v", d)
			}
		})
	}
	// The allowed port of the same allowlist works.
	_, g := attach(t, cases[1].cfg)
	c, err := dialGuest(t, g, gateway(other.Port()))
	if err != nil {
		t.Fatal(err)
	}
	if got := exchange(t, c, "x"); got != "other:x" {
		t.Fatalf("allowed port: %q", got)
	}
}

func TestNATRelaysUDP(t *testing.T) {
	echo := netstacktest.UDPEcho(t, "udp:")
	_, g := attach(t, Config{Mode: ModeNAT, HostLoopback: true})
	got, err := udpRoundTrip(t, g, gateway(echo.Port()), []byte("hello"))
	if err != nil || string(got) != "udp:hello" {
		t.Fatalf("UDP echo: %q, %v", got, err)
	}
	// A large datagram crosses the 64 KiB MTU whole.
	big := bytes.Repeat([]byte("z"), 60000)
	got, err = udpRoundTrip(t, g, gateway(echo.Port()), big)
	if err != nil || len(got) != len(big)+4 {
		t.Fatalf("60000-byte datagram: %d bytes back, %v", len(got), err)
	}
}

func TestNATRefusesUDPWithPortUnreachable(t *testing.T) {
	echo := netstacktest.UDPEcho(t, "udp:")
	_, g := attach(t, Config{Mode: ModeNAT, HostLoopback: true, Allow: []AllowRule{{Prefix: netip.MustParsePrefix("10.0.2.2/32"), Port: echo.Port() + 1}}})
	c, err := gonetDialUDP(g, fullAddr(gateway(echo.Port())))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.Write([]byte("hello"))
	// gonet waits for readability only, not for the error an ICMP
	// message leaves on the socket (the Sentry's sockets do wake up);
	// poll.
	for time.Since(start) < 2*time.Second {
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err = c.Read(make([]byte, 10))
		if refused(err) {
			return
		}
	}
	t.Fatalf("UDP to a port off the allowlist: %v after %v, want connection refused (ICMP port unreachable)", err, time.Since(start))
}

func TestNATRelaysDNS(t *testing.T) {
	dns := netstacktest.NewDNSServer(t, map[string]netip.Addr{"box.gvx.test": netip.MustParseAddr("192.0.2.7")})
	_, g := attach(t, Config{Mode: ModeNAT, DNSServers: []netip.AddrPort{dns.Addr}})
	resp, err := udpRoundTrip(t, g, gateway(DNSPort), netstacktest.Query(7, "box.gvx.test"))
	if err != nil {
		t.Fatal(err)
	}
	if a := netstacktest.AnswerA(resp); a != netip.MustParseAddr("192.0.2.7") {
		t.Fatalf("answer %v (%x)", a, resp)
	}
}

func TestNATRelaysDNSOverTCP(t *testing.T) {
	dns := netstacktest.NewDNSServer(t, map[string]netip.Addr{"big.gvx.test": netip.MustParseAddr("192.0.2.9")})
	_, g := attach(t, Config{Mode: ModeNAT, DNSServers: []netip.AddrPort{dns.Addr}})
	c, err := dialGuest(t, g, gateway(DNSPort))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := netstacktest.Query(11, "big.gvx.test")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(append([]byte{0, byte(len(q))}, q...))
	var n [2]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		t.Fatal(err)
	}
	resp := make([]byte, int(n[0])<<8|int(n[1]))
	if _, err := io.ReadFull(c, resp); err != nil {
		t.Fatal(err)
	}
	if a := netstacktest.AnswerA(resp); a != netip.MustParseAddr("192.0.2.9") {
		t.Fatalf("answer over TCP: %v", a)
	}
}

func TestDNSFailsOverToTheNextServer(t *testing.T) {
	dns := netstacktest.NewDNSServer(t, map[string]netip.Addr{"box.gvx.test": netip.MustParseAddr("192.0.2.8")})
	dead := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), netstacktest.FreePort(t))
	_, g := attach(t, Config{Mode: ModeNAT, DNSServers: []netip.AddrPort{dead, dns.Addr}})

	raddr := fullAddr(gateway(DNSPort))
	c, err := gonetDialUDP(g, raddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := netstacktest.Query(9, "box.gvx.test")
	buf := make([]byte, 512)
	// The first try goes to the dead server; the resolver's retry of the
	// same query goes to the next.
	for try := 0; try < 3; try++ {
		c.Write(q)
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := c.Read(buf)
		if err == nil {
			if a := netstacktest.AnswerA(buf[:n]); a != netip.MustParseAddr("192.0.2.8") {
				t.Fatalf("answer %v", a)
			}
			if try == 0 {
				t.Fatal("the dead server answered")
			}
			return
		}
	}
	t.Fatal("no answer after three tries")
}

func TestModeNoneHasNoRoute(t *testing.T) {
	echo := netstacktest.TCPEcho(t, "host:")
	_, g := attach(t, Config{Mode: ModeNone})
	_, err := dialGuest(t, g, gateway(echo.Port()))
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("dial in ModeNone: %v, want network unreachable", err)
	}
}

func TestNATDialsOutsideDestinations(t *testing.T) {
	tcpEcho := netstacktest.TCPEcho(t, "far:")
	udpEcho := netstacktest.UDPEcho(t, "far:")
	far := netip.MustParseAddr("198.51.100.1")
	_, g := attachRedirected(t, Config{Mode: ModeNAT}, map[netip.AddrPort]netip.AddrPort{
		netip.AddrPortFrom(far, 80): tcpEcho,
		netip.AddrPortFrom(far, 53): udpEcho,
	})
	c, err := dialGuest(t, g, netip.AddrPortFrom(far, 80))
	if err != nil {
		t.Fatal(err)
	}
	if got := exchange(t, c, "x"); got != "far:x" {
		t.Fatalf("TCP to an outside address: %q", got)
	}
	if local := c.LocalAddr().String(); !strings.HasPrefix(local, GuestAddr.String()+":") {
		t.Errorf("the guest's end is %s, want eth0's address", local)
	}
	got, err := udpRoundTrip(t, g, netip.AddrPortFrom(far, 53), []byte("q"))
	if err != nil || string(got) != "far:q" {
		t.Fatalf("UDP to an outside address: %q %v", got, err)
	}
	// A destination the host cannot reach is refused once the dial fails.
	if c, err := dialGuest(t, g, netip.AddrPortFrom(far, 81)); !refused(err) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("TCP whose host dial fails: %v, want refused", err)
	}
}
