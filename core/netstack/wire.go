package netstack

import (
	"context"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// wireQueueLen bounds the frames waiting at one end of a wire. A full
// queue drops, as a real link would; TCP recovers.
const wireQueueLen = 4096

// wireEnd is one end of an in-memory link between two stacks in this
// process (the guest's eth0 and the NAT stack's interface). Frames one end
// writes are received by the other end's stack on that end's own delivery
// goroutine, never on the writer's: the writing stack may hold its locks
// while it writes, and the receiving stack may answer at once (ARP, ICMP).
// Frames are not copied; both stacks share the buffers, copy on write.
//
// A wireEnd carries raw frames; the stacks see it through
// ethernet.Endpoint, so eth0 is an ordinary Ethernet interface with a MAC
// address, ARP and a link type that tools expect.
//
// wireEnd implements stack.LinkEndpoint.
//
// A snapshot holds no wire: the NAT's host side is the host's, and a
// restored sandbox gets a new one. Guest objects that still refer to the
// old end (a route cached by a closed socket) get a closed, unconnected
// end in its place (see afterLoad).
//
// +stateify savable
type wireEnd struct {
	peer *wireEnd                       `state:"nosave"`
	caps stack.LinkEndpointCapabilities `state:"nosave"`
	// wake has room for one pending wake-up of the delivery goroutine.
	wake chan struct{} `state:"nosave"`
	done chan struct{} `state:"nosave"`

	mu         sync.Mutex              `state:"nosave"`
	dispatcher stack.NetworkDispatcher `state:"nosave"`
	mtu        uint32                  `state:"nosave"`
	linkAddr   tcpip.LinkAddress       `state:"nosave"`
	queue      []*stack.PacketBuffer   `state:"nosave"`
	dropped    uint64                  `state:"nosave"`
	closed     bool                    `state:"nosave"`
}

// afterLoad is called by the generated StateLoad: a restored end is
// closed, so writes to it fail instead of reaching a peer it has not.
func (e *wireEnd) afterLoad(context.Context) { e.closed = true }

var _ stack.LinkEndpoint = (*wireEnd)(nil)

// newWire returns both ends of a wire with the given MTU (frame payload,
// Ethernet header included) and MAC addresses, and starts their delivery
// goroutines. Close both ends to stop them.
func newWire(mtu uint32, mac1, mac2 tcpip.LinkAddress) (*wireEnd, *wireEnd) {
	a := &wireEnd{mtu: mtu, linkAddr: mac1, wake: make(chan struct{}, 1), done: make(chan struct{})}
	b := &wireEnd{mtu: mtu, linkAddr: mac2, wake: make(chan struct{}, 1), done: make(chan struct{})}
	a.peer, b.peer = b, a
	go a.deliverLoop()
	go b.deliverLoop()
	return a, b
}

// WritePackets implements stack.LinkWriter.WritePackets.
func (e *wireEnd) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	if e.peer == nil { // restored from a snapshot: no peer
		return 0, &tcpip.ErrClosedForSend{}
	}
	n := 0
	for _, pkt := range pkts.AsSlice() {
		// A fresh packet with no parsed headers: the receiving stack
		// parses the frame from the start.
		in := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: pkt.ToBuffer()})
		in.NetworkProtocolNumber = pkt.NetworkProtocolNumber
		if !e.peer.enqueue(in) {
			return n, &tcpip.ErrClosedForSend{}
		}
		n++
	}
	return n, nil
}

// enqueue queues an inbound frame, taking its reference; it reports false
// if the end is closed.
func (e *wireEnd) enqueue(pkt *stack.PacketBuffer) bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		pkt.DecRef()
		return false
	}
	if len(e.queue) >= wireQueueLen {
		e.dropped++
		e.mu.Unlock()
		pkt.DecRef()
		return true
	}
	e.queue = append(e.queue, pkt)
	wasEmpty := len(e.queue) == 1
	e.mu.Unlock()
	if wasEmpty {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// deliverLoop hands queued frames to the stack until the end is closed.
func (e *wireEnd) deliverLoop() {
	var batch []*stack.PacketBuffer
	for {
		select {
		case <-e.done:
			return
		case <-e.wake:
		}
		e.mu.Lock()
		batch, e.queue = e.queue, batch[:0]
		d := e.dispatcher
		e.mu.Unlock()
		for i, pkt := range batch {
			if d != nil {
				d.DeliverNetworkPacket(pkt.NetworkProtocolNumber, pkt)
			}
			pkt.DecRef()
			batch[i] = nil
		}
	}
}

// Attach implements stack.NetworkLinkEndpoint.Attach.
func (e *wireEnd) Attach(d stack.NetworkDispatcher) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dispatcher = d
}

// IsAttached implements stack.NetworkLinkEndpoint.IsAttached.
func (e *wireEnd) IsAttached() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dispatcher != nil
}

// Wait implements stack.NetworkLinkEndpoint.Wait.
func (*wireEnd) Wait() {}

// MTU implements stack.NetworkLinkEndpoint.MTU.
func (e *wireEnd) MTU() uint32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mtu
}

// SetMTU implements stack.NetworkLinkEndpoint.SetMTU.
func (e *wireEnd) SetMTU(mtu uint32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mtu = mtu
}

// MaxHeaderLength implements stack.NetworkLinkEndpoint.MaxHeaderLength.
func (*wireEnd) MaxHeaderLength() uint16 { return 0 }

// LinkAddress implements stack.NetworkLinkEndpoint.LinkAddress.
func (e *wireEnd) LinkAddress() tcpip.LinkAddress {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.linkAddr
}

// SetLinkAddress implements stack.NetworkLinkEndpoint.SetLinkAddress.
func (e *wireEnd) SetLinkAddress(addr tcpip.LinkAddress) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.linkAddr = addr
}

// Capabilities implements stack.NetworkLinkEndpoint.Capabilities.
func (e *wireEnd) Capabilities() stack.LinkEndpointCapabilities { return e.caps }

// ARPHardwareType implements stack.NetworkLinkEndpoint.ARPHardwareType;
// ethernet.Endpoint reports Ethernet on top.
func (*wireEnd) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }

// AddHeader implements stack.NetworkLinkEndpoint.AddHeader.
func (*wireEnd) AddHeader(*stack.PacketBuffer) {}

// ParseHeader implements stack.NetworkLinkEndpoint.ParseHeader.
func (*wireEnd) ParseHeader(*stack.PacketBuffer) bool { return true }

// Close implements stack.NetworkLinkEndpoint.Close: it stops delivery and
// drops what is queued. The peer's writes fail from then on.
func (e *wireEnd) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	q := e.queue
	e.queue = nil
	e.mu.Unlock()
	close(e.done)
	for _, pkt := range q {
		pkt.DecRef()
	}
}

// SetOnCloseAction implements stack.NetworkLinkEndpoint.SetOnCloseAction.
func (*wireEnd) SetOnCloseAction(func()) {}

// Dropped returns how many inbound frames a full queue dropped.
func (e *wireEnd) Dropped() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dropped
}
