package netstack

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/link/loopback"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

// These tests stand a plain gVisor stack in for the guest (the Sentry's
// is the same stack with more around it; core/cmd/rungv's tests boot real
// sandboxes). All host traffic goes to servers on 127.0.0.1.

// newGuestStack returns a stack like a sandbox's before Attach: loopback
// only.
func newGuestStack(t testing.TB) *stack.Stack {
	t.Helper()
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4},
		HandleLocal:        true,
	})
	if err := s.CreateNICWithOptions(s.NextNICID(), loopback.New(), stack.NICOptions{Name: "lo"}); err != nil {
		t.Fatal(err)
	}
	lo := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{Address: guestLoopback, PrefixLen: 8}}
	if err := s.AddProtocolAddress(1, lo, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	s.AddRoute(tcpip.Route{Destination: lo.AddressWithPrefix.Subnet(), NIC: 1})
	t.Cleanup(func() { s.Close(); s.Wait(); s.Destroy() })
	return s
}

// attach creates a Network for cfg on a fresh guest stack.
func attach(t testing.TB, cfg Config) (*Network, *stack.Stack) {
	t.Helper()
	return attachRedirected(t, cfg, nil)
}

// attachRedirected is attach with the NAT's host dials of the addresses
// in redirect sent to other addresses (servers on 127.0.0.1 standing in
// for outside hosts), and every other dial refused: the test sends
// nothing beyond the host's loopback.
func attachRedirected(t testing.TB, cfg Config, redirect map[netip.AddrPort]netip.AddrPort) (*Network, *stack.Stack) {
	t.Helper()
	cfg.Logf = t.Logf
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.dial = func(ctx context.Context, network string, addr netip.AddrPort) (net.Conn, error) {
		if to, ok := redirect[addr]; ok {
			addr = to
		} else if !addr.Addr().IsLoopback() {
			return nil, fmt.Errorf("test: dial of %s blocked: tests reach nothing beyond 127.0.0.0/8", addr)
		}
		return hostDial(ctx, network, addr)
	}
	g := newGuestStack(t)
	if err := n.Attach(g); err != nil {
		n.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, g
}

func fullAddr(ap netip.AddrPort) tcpip.FullAddress {
	return tcpip.FullAddress{Addr: tcpipAddr(ap.Addr()), Port: ap.Port()}
}

// gateway returns the gateway's address on port.
func gateway(port uint16) netip.AddrPort { return netip.AddrPortFrom(GatewayAddr, port) }

// dialGuest connects from the guest's stack, as a guest process would.
func dialGuest(t testing.TB, g *stack.Stack, dst netip.AddrPort) (*gonet.TCPConn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return gonet.DialContextTCP(ctx, g, fullAddr(dst), ipv4.ProtocolNumber)
}

// exchange writes msg, half-closes and reads everything back.
func exchange(t testing.TB, c interface {
	net.Conn
	CloseWrite() error
}, msg string) string {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	c.CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(got)
}

// udpRoundTrip sends msg from the guest to dst and returns the answer or
// the error.
func udpRoundTrip(t testing.TB, g *stack.Stack, dst netip.AddrPort, msg []byte) ([]byte, error) {
	t.Helper()
	raddr := fullAddr(dst)
	c, err := gonet.DialUDP(g, nil, &raddr, ipv4.ProtocolNumber)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// refused reports whether err is a refused connection as gonet reports
// it.
func refused(err error) bool {
	return err != nil && strings.Contains(err.Error(), "refused")
}

func gonetDialUDP(g *stack.Stack, raddr tcpip.FullAddress) (*gonet.UDPConn, error) {
	return gonet.DialUDP(g, nil, &raddr, ipv4.ProtocolNumber)
}
