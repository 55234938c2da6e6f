package sentry

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/sentry/inet"
	"gvisor.dev/gvisor/pkg/sentry/socket/netfilter"
	"gvisor.dev/gvisor/pkg/sentry/socket/netstack"
	"gvisor.dev/gvisor/pkg/sentry/uniqueid"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/link/loopback"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/nftables"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/raw"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

// netstackCreator builds the in-memory network stacks of the sandbox: the
// root namespace's and one for every network namespace the guest creates.
//
// netstackCreator implements inet.NetworkStackCreator.
//
// +stateify savable
type netstackCreator struct {
	clock       tcpip.Clock
	ids         uniqueid.Provider
	netRaw      bool
	packetWrite bool
	nftables    bool
}

var _ inet.NetworkStackCreator = (*netstackCreator)(nil)

// CreateStack implements inet.NetworkStackCreator.CreateStack. A namespace
// made inside the sandbox gets its own loopback interface, as on Linux;
// runc and dockerd rely on it.
func (c *netstackCreator) CreateStack() (inet.Stack, error) {
	s, err := c.newStack()
	if err != nil {
		return nil, err
	}
	if err := addLoopback(s.Stack); err != nil {
		s.Destroy()
		return nil, err
	}
	return s, nil
}

// newStack returns a stack with every protocol the guest may use and no
// interfaces.
func (c *netstackCreator) newStack() (*netstack.Stack, error) {
	opts := stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
		Clock:              c.clock,
		Stats:              netstack.Metrics,
		HandleLocal:        true,
		DefaultIPTables:    netfilter.DefaultLinuxTables,
		// Packet sockets can only read unless the sandbox allows writes.
		AllowPacketEndpointWrite: c.packetWrite,
	}
	if c.netRaw {
		// Without a raw factory no raw or packet endpoint can be made,
		// whatever capabilities the guest holds.
		opts.RawFactory = raw.EndpointFactory{}
	}
	s := netstack.NewStack(stack.New(opts), c.ids.UniqueID())
	if c.nftables {
		enableNFTables(s.Stack)
	}

	sack := tcpip.TCPSACKEnabled(true)
	if err := s.Stack.SetTransportProtocolOption(tcp.ProtocolNumber, &sack); err != nil {
		s.Destroy()
		return nil, fmt.Errorf("sentry: enabling TCP SACK: %s", err)
	}
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	if err := s.Stack.SetTransportProtocolOption(tcp.ProtocolNumber, &moderate); err != nil {
		s.Destroy()
		return nil, fmt.Errorf("sentry: enabling TCP receive buffer auto-tuning: %s", err)
	}
	ttl := tcpip.DefaultTTLOption(netstack.DefaultTTL)
	for _, proto := range []tcpip.NetworkProtocolNumber{ipv4.ProtocolNumber, ipv6.ProtocolNumber} {
		if err := s.Stack.SetNetworkProtocolOption(proto, &ttl); err != nil {
			s.Destroy()
			return nil, fmt.Errorf("sentry: setting the default TTL of protocol %d: %s", proto, err)
		}
	}
	return s, nil
}

// addLoopback brings up "lo" with 127.0.0.1/8 and ::1/128 as interface 1.
func addLoopback(s *stack.Stack) error {
	id := s.NextNICID()
	if id != linux.LOOPBACK_IFINDEX {
		return fmt.Errorf("sentry: loopback would be interface %d, want %d; it must be created first", id, linux.LOOPBACK_IFINDEX)
	}
	opts := stack.NICOptions{Name: "lo", DeliverLinkPackets: true}
	if err := s.CreateNICWithOptions(id, ethernet.New(loopback.New()), opts); err != nil {
		return fmt.Errorf("sentry: creating the loopback interface: %s", err)
	}
	v4 := tcpip.AddrFrom4([4]byte{127, 0, 0, 1})
	v6 := tcpip.AddrFrom16([16]byte{15: 1})
	for _, a := range []tcpip.ProtocolAddress{
		{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{Address: v4, PrefixLen: 8}},
		{Protocol: ipv6.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{Address: v6, PrefixLen: 128}},
	} {
		if err := s.AddProtocolAddress(id, a, stack.AddressProperties{}); err != nil {
			return fmt.Errorf("sentry: adding %s to the loopback interface: %s", a.AddressWithPrefix, err)
		}
	}
	s.AddRoute(tcpip.Route{Destination: tcpip.AddressWithPrefix{Address: v4, PrefixLen: 8}.Subnet(), NIC: id})
	s.AddRoute(tcpip.Route{Destination: tcpip.AddressWithPrefix{Address: v6, PrefixLen: 128}.Subnet(), NIC: id})
	return nil
}

// enableNFTables gives s gVisor's nftables, as a new stack or a restored
// one (whose tables a snapshot does not hold) gets them.
func enableNFTables(s *stack.Stack) {
	s.SetNFTables(nftables.NewNFTables(s, s.Clock(), s.SecureRNG()))
}
