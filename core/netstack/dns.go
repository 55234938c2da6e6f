package netstack

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
)

// dnsMaxPending bounds the queries a DNS flow remembers for fail-over.
const dnsMaxPending = 256

// dialFunc dials a host socket.
type dialFunc func(ctx context.Context, network string, addr netip.AddrPort) (net.Conn, error)

// dnsRelay is the far side of a guest UDP flow to the gateway's port 53:
// it sends each query to one of the upstream resolvers over a connected
// host socket and delivers whatever they answer. The first resolver is
// used until the guest's resolver retries a query (same ID) that it did
// not answer; the retry goes to the next one, which stays current.
//
// dnsRelay implements datagramPeer.
type dnsRelay struct {
	servers []netip.AddrPort
	dial    dialFunc

	mu      sync.Mutex
	deliver func([]byte)
	conns   []net.Conn // by server, dialed on first use
	cur     int
	pending map[uint16]int // query ID → server it went to
	closed  bool
	ready   chan struct{} // closed once deliver is set
	done    chan struct{}
	readers sync.WaitGroup
}

var _ datagramPeer = (*dnsRelay)(nil)

func newDNSRelay(servers []netip.AddrPort, dial dialFunc) *dnsRelay {
	return &dnsRelay{
		servers: servers,
		dial:    dial,
		conns:   make([]net.Conn, len(servers)),
		pending: map[uint16]int{},
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// send implements datagramPeer.send.
func (r *dnsRelay) send(q []byte) error {
	if len(q) < 12 {
		return nil // not a DNS message
	}
	id := binary.BigEndian.Uint16(q)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return net.ErrClosed
	}
	if prev, ok := r.pending[id]; ok && prev == r.cur {
		r.cur = (r.cur + 1) % len(r.servers)
	}
	i := r.cur
	if len(r.pending) >= dnsMaxPending {
		clear(r.pending)
	}
	r.pending[id] = i
	c, err := r.connLocked(i)
	r.mu.Unlock()
	if err != nil {
		// This resolver cannot be reached from here; the retry goes to
		// the next.
		return nil
	}
	c.Write(q)
	return nil
}

// connLocked returns the socket to server i, dialing it and starting its
// reader first if needed.
//
// Preconditions: r.mu is held.
func (r *dnsRelay) connLocked(i int) (net.Conn, error) {
	if c := r.conns[i]; c != nil {
		return c, nil
	}
	network := "udp4"
	if r.servers[i].Addr().Is6() {
		network = "udp6"
	}
	c, err := r.dial(context.Background(), network, r.servers[i])
	if err != nil {
		return nil, err
	}
	r.conns[i] = c
	r.readers.Add(1)
	go r.read(c)
	return c, nil
}

// read delivers the answers that come back on c.
func (r *dnsRelay) read(c net.Conn) {
	defer r.readers.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, err := c.Read(buf)
		if err != nil {
			if isTransient(err) {
				continue
			}
			return
		}
		if n < 12 {
			continue
		}
		select {
		case <-r.ready:
		case <-r.done:
			return
		}
		r.mu.Lock()
		delete(r.pending, binary.BigEndian.Uint16(buf))
		deliver := r.deliver
		r.mu.Unlock()
		deliver(buf[:n])
	}
}

// serve implements datagramPeer.serve.
func (r *dnsRelay) serve(deliver func([]byte)) {
	r.mu.Lock()
	r.deliver = deliver
	r.mu.Unlock()
	close(r.ready)
	<-r.done
	r.readers.Wait()
}

// Close implements io.Closer.
func (r *dnsRelay) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	for _, c := range r.conns {
		if c != nil {
			c.Close()
		}
	}
	close(r.done)
	return nil
}

// errNoDNS refuses DNS when the host has no resolver.
var errNoDNS = errors.New("the host's /etc/resolv.conf names no nameserver; DNS is refused")
