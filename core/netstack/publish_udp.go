package netstack

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// serveUDP relays datagrams: each host peer gets its own guest socket,
// connected to the guest port, for as long as the flow is active.
func (pub *published) serveUDP(ctx context.Context, guest *stack.Stack, flows *flowSet, relays *gate, logf func(string, ...any)) {
	var mu sync.Mutex
	peers := map[netip.AddrPort]*udpFlow{}
	var count atomic.Int32
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := pub.dgram.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if isTransient(err) {
				continue
			}
			logf("netstack: publish %s: %v", pub.p, err)
			return
		}
		mu.Lock()
		f := peers[from]
		mu.Unlock()
		if f == nil {
			if count.Load() >= maxUDPFlows {
				continue
			}
			relays.wait(ctx.Done())
			g, err := gonet.DialUDP(guest, nil, &tcpip.FullAddress{Addr: guestLoopback, Port: pub.p.GuestPort}, ipv4.ProtocolNumber)
			if err != nil {
				logf("netstack: publish %s: %v", pub.p, err)
				continue
			}
			f = &udpFlow{a: connPeer{g}, b: &udpReplyPeer{c: pub.dgram, to: from, closed: make(chan struct{})}, idle: udpIdleTimeout}
			mu.Lock()
			peers[from] = f
			mu.Unlock()
			count.Add(1)
			flows.run(func() {
				f.run()
				mu.Lock()
				delete(peers, from)
				mu.Unlock()
				count.Add(-1)
			}, f)
		}
		f.touch()
		f.a.send(buf[:n])
	}
}

// udpReplyPeer is a host UDP peer of a published port: datagrams to it
// leave through the port's shared socket; what it sends arrives through
// the port's read loop, not through serve.
//
// udpReplyPeer implements datagramPeer.
type udpReplyPeer struct {
	c      *net.UDPConn
	to     netip.AddrPort
	closed chan struct{}
	once   sync.Once
}

var _ datagramPeer = (*udpReplyPeer)(nil)

// send implements datagramPeer.send.
func (p *udpReplyPeer) send(b []byte) error {
	_, err := p.c.WriteToUDPAddrPort(b, p.to)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return nil // one lost datagram; the flow goes on
	}
	return err
}

// serve implements datagramPeer.serve: answers come in through the
// port's read loop.
func (p *udpReplyPeer) serve(func([]byte)) { <-p.closed }

// Close implements io.Closer. The shared socket stays open.
func (p *udpReplyPeer) Close() error {
	p.once.Do(func() { close(p.closed) })
	return nil
}
