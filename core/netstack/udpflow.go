package netstack

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// UDP flows have no end; they are closed after this long without a
// datagram either way (Linux conntrack's UDP timeout is 30 s, 120 s for a
// flow seen both ways).
const (
	udpIdleTimeout = 60 * time.Second
	dnsIdleTimeout = 10 * time.Second
	// maxUDPFlows caps the UDP flows of a sandbox; beyond it new flows
	// are refused with ICMP port unreachable.
	maxUDPFlows = 1024
	// maxDatagram is the largest UDP payload.
	maxDatagram = 65535
)

// datagramPeer is the far side of a UDP flow: the guest's socket reached
// through a gVisor stack, a host socket, or the DNS relay.
type datagramPeer interface {
	// send delivers one datagram.
	send(b []byte) error
	// serve calls deliver with every datagram that comes back, until the
	// peer is closed.
	serve(deliver func([]byte))
	Close() error
}

var _ io.Closer = (*udpFlow)(nil)

// udpFlow relays datagrams between two peers until neither has sent
// anything for idle, or until either fails or is closed.
type udpFlow struct {
	a, b  datagramPeer
	idle  time.Duration
	last  atomic.Int64 // UnixNano of the last datagram
	timer *time.Timer
	once  sync.Once
}

// run relays until the flow ends and then closes both peers.
func (f *udpFlow) run() {
	f.touch()
	f.timer = time.AfterFunc(f.idle, f.checkIdle)
	defer f.timer.Stop()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.b.serve(f.relay(f.a))
		f.close()
	}()
	f.a.serve(f.relay(f.b))
	f.close()
	wg.Wait()
}

// relay returns a deliver function that sends to dst.
func (f *udpFlow) relay(dst datagramPeer) func([]byte) {
	return func(b []byte) {
		f.touch()
		if err := dst.send(b); err != nil && !isTransient(err) {
			f.close()
		}
	}
}

func (f *udpFlow) touch() { f.last.Store(time.Now().UnixNano()) }

// checkIdle closes the flow if it has been idle long enough, or checks
// again when it would be.
func (f *udpFlow) checkIdle() {
	since := time.Since(time.Unix(0, f.last.Load()))
	if since >= f.idle {
		f.close()
		return
	}
	f.timer.Reset(f.idle - since)
}

func (f *udpFlow) close() {
	f.once.Do(func() {
		f.a.Close()
		f.b.Close()
	})
}

// Close implements io.Closer, for the flow set.
func (f *udpFlow) Close() error {
	f.close()
	return nil
}

// connPeer is a connected datagram socket (a host socket or a gonet
// UDPConn) as a datagramPeer.
//
// connPeer implements datagramPeer.
type connPeer struct {
	net.Conn
}

var _ datagramPeer = connPeer{}

// send implements datagramPeer.send.
func (p connPeer) send(b []byte) error {
	_, err := p.Write(b)
	return err
}

// serve implements datagramPeer.serve.
func (p connPeer) serve(deliver func([]byte)) {
	buf := make([]byte, maxDatagram)
	for {
		n, err := p.Read(buf)
		if err != nil {
			if isTransient(err) {
				// ECONNREFUSED from an ICMP error on a connected host
				// socket: the next datagram may still get through.
				continue
			}
			return
		}
		deliver(buf[:n])
	}
}

// isTransient reports whether a datagram socket error leaves the socket
// usable: an ICMP error reported on a connected socket.
func isTransient(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}
