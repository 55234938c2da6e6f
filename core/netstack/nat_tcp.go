package netstack

import (
	"context"
	"fmt"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// handleTCP decides a guest connection, dials its host side and relays
// it. It runs on its own goroutine (the forwarder's).
func (n *nat) handleTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	src := addrPort(id.RemoteAddress, id.RemotePort)
	dst := addrPort(id.LocalAddress, id.LocalPort)
	t, err := n.policy.decide(dst)
	if err == nil && t.dns {
		// DNS over TCP (large answers, zone transfers) goes to the first
		// resolver.
		if len(n.dns) == 0 {
			err = errNoDNS
		} else {
			t.addr = n.dns[0]
		}
	}
	if err == nil && n.tcpFlows.Load() >= maxTCPFlows {
		err = fmt.Errorf("the sandbox has %d connections open through the NAT already", maxTCPFlows)
	}
	if err != nil {
		n.logf("netstack: refused tcp %s -> %s: %v", src, dst, err)
		r.Complete(true)
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, tcpDialTimeout)
	host, err := n.dial(ctx, network("tcp", t.addr), t.addr)
	cancel()
	if err != nil {
		n.logf("netstack: tcp %s -> %s: dialing %s: %v", src, dst, t.addr, err)
		r.Complete(true)
		return
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	r.Complete(false)
	if terr != nil {
		// The guest gave up meanwhile.
		host.Close()
		return
	}
	guest := gonet.NewTCPConn(&wq, ep)
	hs, ok := host.(stream)
	if !ok {
		guest.Close()
		host.Close()
		return
	}
	n.tcpFlows.Add(1)
	if !n.flows.run(func() { defer n.tcpFlows.Add(-1); relayStreams(nil, guest, hs) }, guest, host) {
		n.tcpFlows.Add(-1)
	}
}
