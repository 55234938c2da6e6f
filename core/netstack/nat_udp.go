package netstack

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// handleUDP decides a datagram no flow claims yet: the first of a new
// guest flow. It runs on the NAT link's delivery goroutine; returning
// false makes the stack answer ICMP port unreachable.
func (n *nat) handleUDP(id stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
	src := addrPort(id.RemoteAddress, id.RemotePort)
	dst := addrPort(id.LocalAddress, id.LocalPort)
	t, err := n.policy.decide(dst)
	if err == nil && t.dns && len(n.dns) == 0 {
		err = errNoDNS
	}
	if err == nil && n.udpFlows.Load() >= maxUDPFlows {
		err = fmt.Errorf("the sandbox has %d UDP flows open already", maxUDPFlows)
	}
	if err != nil {
		n.logf("netstack: refused udp %s -> %s: %v", src, dst, err)
		return false
	}
	var far datagramPeer
	idle := udpIdleTimeout
	if t.dns {
		far = newDNSRelay(n.dns, n.dial)
		idle = dnsIdleTimeout
	} else {
		host, err := n.dial(n.ctx, network("udp", t.addr), t.addr)
		if err != nil {
			n.logf("netstack: udp %s -> %s: dialing %s: %v", src, dst, t.addr, err)
			return false
		}
		far = connPeer{host}
	}
	var wq waiter.Queue
	ep, terr := udp.NewForwarderRequest(n.s, id, pkt).CreateEndpoint(&wq)
	if terr != nil {
		far.Close()
		n.logf("netstack: udp %s -> %s: %s", src, dst, terr)
		return true
	}
	f := &udpFlow{a: connPeer{gonet.NewUDPConn(&wq, ep)}, b: far, idle: idle}
	n.udpFlows.Add(1)
	if !n.flows.run(func() { defer n.udpFlows.Add(-1); f.run() }, f) {
		n.udpFlows.Add(-1)
	}
	return true
}
