package netstack

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

const (
	// natNIC is the NAT stack's only interface.
	natNIC tcpip.NICID = 1
	// tcpDialTimeout bounds dialing the host side of a guest connection;
	// the guest's connect waits that long at most, then gets a RST.
	tcpDialTimeout = 20 * time.Second
	// maxTCPInFlight bounds the guest connections being dialed at once;
	// SYNs beyond it are dropped and the guest retransmits them.
	maxTCPInFlight = 512
	// maxTCPFlows bounds the guest's open connections through the NAT,
	// each a host descriptor; beyond it new ones get a RST.
	maxTCPFlows = 4096
)

// nat is the host side of eth0: a gVisor stack that takes every flow the
// guest sends out and dials it as a host socket.
type nat struct {
	s      *stack.Stack
	policy *Policy
	dns    []netip.AddrPort
	dial   dialFunc
	flows  *flowSet
	logf   func(string, ...any)
	ctx    context.Context

	udpFlows atomic.Int32
	tcpFlows atomic.Int32
}

// newNAT creates the NAT stack on link (the NAT's end of the wire).
func newNAT(ctx context.Context, link stack.LinkEndpoint, policy *Policy, dns []netip.AddrPort, dial dialFunc, flows *flowSet, logf func(string, ...any)) (*nat, error) {
	n := &nat{policy: policy, dns: dns, dial: dial, flows: flows, logf: logf, ctx: ctx}
	n.s = stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	if err := n.configure(link); err != nil {
		n.s.Destroy()
		return nil, err
	}
	return n, nil
}

// configure gives the stack its interface and forwarders.
func (n *nat) configure(link stack.LinkEndpoint) error {
	s := n.s
	if err := s.CreateNICWithOptions(natNIC, ethernet.New(link), stack.NICOptions{Name: "gvx-nat"}); err != nil {
		return fmt.Errorf("netstack: creating the NAT interface: %s", err)
	}
	gw := tcpip.ProtocolAddress{
		Protocol:          ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpipAddr(GatewayAddr), PrefixLen: Subnet.Bits()},
	}
	if err := s.AddProtocolAddress(natNIC, gw, stack.AddressProperties{}); err != nil {
		return fmt.Errorf("netstack: adding the gateway address: %s", err)
	}
	// Every destination the guest names is this stack's to answer for,
	// and it answers from that address.
	if err := s.SetPromiscuousMode(natNIC, true); err != nil {
		return fmt.Errorf("netstack: NAT promiscuous mode: %s", err)
	}
	if err := s.SetSpoofing(natNIC, true); err != nil {
		return fmt.Errorf("netstack: NAT spoofing: %s", err)
	}
	subnet := tcpip.AddressWithPrefix{Address: tcpipAddr(Subnet.Addr()), PrefixLen: Subnet.Bits()}.Subnet()
	s.SetRouteTable([]tcpip.Route{
		{Destination: subnet, NIC: natNIC},
		// Anything else lives behind the guest (networks it routes, such
		// as a Docker bridge without masquerading).
		{Destination: header.IPv4EmptySubnet, Gateway: tcpipAddr(GuestAddr), NIC: natNIC},
	})
	if err := tuneTCP(s); err != nil {
		return err
	}
	fwd := tcp.NewForwarder(s, 4<<20, maxTCPInFlight, n.handleTCP)
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, fwd.HandlePacket)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, n.handleUDP)
	return nil
}

// tuneTCP sets the options a relay stack wants: SACK, receive buffer
// auto-tuning and room for fast local transfers.
func tuneTCP(s *stack.Stack) error {
	sack := tcpip.TCPSACKEnabled(true)
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: 8 << 20}
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: 8 << 20}
	for _, opt := range []tcpip.SettableTransportProtocolOption{&sack, &moderate, &rcv, &snd} {
		if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, opt); err != nil {
			return fmt.Errorf("netstack: setting TCP option %T: %s", opt, err)
		}
	}
	return nil
}

// close stops the stack.
func (n *nat) close() {
	n.s.Close()
	n.s.Wait()
	n.s.Destroy()
}

// network names the host socket type for addr: "tcp4", "udp6", ...
func network(proto string, addr netip.AddrPort) string {
	if addr.Addr().Is4() {
		return proto + "4"
	}
	return proto + "6"
}

// hostDial dials a host socket without Go's keep-alive default, whose
// setsockopt calls the lockdown does not allow.
func hostDial(ctx context.Context, network string, addr netip.AddrPort) (net.Conn, error) {
	d := net.Dialer{KeepAlive: -1}
	return d.DialContext(ctx, network, addr.String())
}

func tcpipAddr(a netip.Addr) tcpip.Address {
	return tcpip.AddrFromSlice(a.AsSlice())
}

func addrPort(a tcpip.Address, port uint16) netip.AddrPort {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return netip.AddrPortFrom(ip, port)
}
