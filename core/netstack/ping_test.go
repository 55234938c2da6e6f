package netstack

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// ping sends one ICMP echo request from the guest (a ping socket) and
// reports whether a reply came within timeout.
func ping(t *testing.T, g *stack.Stack, dst netip.Addr, timeout time.Duration) bool {
	t.Helper()
	var wq waiter.Queue
	ep, err := g.NewEndpoint(icmp.ProtocolNumber4, ipv4.ProtocolNumber, &wq)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	entry, ch := waiter.NewChannelEntry(waiter.ReadableEvents)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	req := header.ICMPv4(make([]byte, header.ICMPv4MinimumSize+4))
	req.SetType(header.ICMPv4Echo)
	copy(req.Payload(), "gvx!")
	if _, err := ep.Write(bytes.NewReader(req), tcpip.WriteOptions{To: &tcpip.FullAddress{Addr: tcpipAddr(dst)}}); err != nil {
		t.Fatalf("ping %s: %s", dst, err)
	}
	select {
	case <-ch:
		var buf bytes.Buffer
		_, rerr := ep.Read(&buf, tcpip.ReadOptions{})
		return rerr == nil && header.ICMPv4(buf.Bytes()).Type() == header.ICMPv4EchoReply
	case <-time.After(timeout):
		return false
	}
}

func TestOnlyTheGatewayAnswersPings(t *testing.T) {
	_, g := attach(t, Config{Mode: ModeNAT})
	if !ping(t, g, GatewayAddr, 5*time.Second) {
		t.Error("the gateway does not answer pings")
	}
	// The NAT stack accepts packets to every address but answers echo
	// requests only for its own: no host looks alive that is not, and no
	// echo request leaves the sandbox.
	if ping(t, g, netip.MustParseAddr("198.51.100.1"), 300*time.Millisecond) {
		t.Error("a ping to an outside address was answered by the NAT")
	}
}
