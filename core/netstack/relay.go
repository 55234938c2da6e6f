package netstack

import (
	"net"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"z.gfire.dev/gvx/core/lockdown"
)

// relayBufSize is the copy buffer of one direction of a relayed stream.
const relayBufSize = 128 << 10

var relayBufs = sync.Pool{New: func() any { b := make([]byte, relayBufSize); return &b }}

// stream is a connection whose sending half can be closed alone: TCP on
// the host, a unix socket, or a connection in a gVisor stack.
type stream interface {
	net.Conn
	CloseWrite() error
}

var (
	_ stream = (*gonet.TCPConn)(nil)
	_ stream = (*net.TCPConn)(nil)
	_ stream = (*net.UnixConn)(nil)
)

// relayStreams copies a to b and b to a until both directions end, then
// closes both. A direction that reaches EOF half-closes its destination,
// so the other direction keeps flowing (a request sent with shutdown(WR)
// still gets its answer); a direction that fails closes both.
//
// Once drain is closed, the relay ends as soon as b has said all it will
// (b → a reached EOF or failed), without waiting for a: that is how a
// sandbox that is going away still delivers what its guest wrote last. A
// nil drain never fires.
func relayStreams(drain <-chan struct{}, a, b stream) {
	toB := make(chan struct{})
	go func() {
		defer close(toB)
		copyHalf(b, a)
	}()
	copyHalf(a, b)
	select {
	case <-toB:
	case <-drain:
	}
	a.Close()
	b.Close()
}

// copyHalf copies src to dst, then half-closes dst, or closes both on an
// error.
func copyHalf(dst, src stream) {
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	_, err := lockdown.Copy(dst, src, *bp)
	if err != nil {
		dst.Close()
		src.Close()
		return
	}
	dst.CloseWrite()
}
