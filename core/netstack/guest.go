package netstack

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// MAC addresses of the two ends of eth0 (locally administered, the IPv4
// address in the last bytes).
var (
	guestMAC   = tcpip.LinkAddress("\x02\x00\x0a\x00\x02\x0f")
	gatewayMAC = tcpip.LinkAddress("\x02\x00\x0a\x00\x02\x02")
)

// addEth0 gives the guest's stack eth0 on link with GuestAddr, the
// on-link route of Subnet and the default route via GatewayAddr.
func addEth0(s *stack.Stack, link stack.LinkEndpoint) error {
	id := s.NextNICID()
	// DeliverLinkPackets: packet sockets (tcpdump, --net-raw) see eth0's
	// traffic.
	if err := s.CreateNICWithOptions(id, ethernet.New(link), stack.NICOptions{Name: GuestNIC, DeliverLinkPackets: true}); err != nil {
		return fmt.Errorf("netstack: creating %s: %s", GuestNIC, err)
	}
	addr := tcpip.ProtocolAddress{
		Protocol:          ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpipAddr(GuestAddr), PrefixLen: Subnet.Bits()},
	}
	if err := s.AddProtocolAddress(id, addr, stack.AddressProperties{}); err != nil {
		return fmt.Errorf("netstack: adding %s to %s: %s", GuestAddr, GuestNIC, err)
	}
	s.AddRoute(tcpip.Route{Destination: addr.AddressWithPrefix.Subnet(), NIC: id})
	s.AddRoute(tcpip.Route{Destination: header.IPv4EmptySubnet, Gateway: tcpipAddr(GatewayAddr), NIC: id})
	return nil
}
