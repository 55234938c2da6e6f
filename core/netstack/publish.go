package netstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// guestDialTimeout bounds connecting to the guest for a published port.
const guestDialTimeout = 10 * time.Second

// guestLoopback is where published ports reach guest services first.
var guestLoopback = tcpip.AddrFrom4([4]byte{127, 0, 0, 1})

// published is one published port: its host listener and how it relays
// into the guest.
type published struct {
	p      Publish
	stream net.Listener // TCP and unix
	dgram  *net.UDPConn // UDP
	// targets are the guest addresses a connection is tried on, in
	// order: 127.0.0.1 (services on 0.0.0.0 or loopback, Docker's
	// userland proxy), then, with eth0, 10.0.2.15 (services bound to it,
	// DNAT rules that skip loopback). Set before serving.
	targets []tcpip.Address
}

// listen opens p's host side. Unix sockets are never unlinked by the
// process (the lockdown forbids unlink); the caller removes the file.
func listen(p Publish) (*published, error) {
	switch {
	case p.HostPath != "":
		if _, err := os.Lstat(p.HostPath); err == nil {
			return nil, fmt.Errorf("netstack: publish %s: %s exists; remove it or pick another path (is another sandbox using it?)", p, p.HostPath)
		}
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p.HostPath, Net: "unix"})
		if err != nil {
			return nil, fmt.Errorf("netstack: publish %s: %w", p, err)
		}
		l.SetUnlinkOnClose(false)
		if err := os.Chmod(p.HostPath, 0o600); err != nil {
			l.Close()
			os.Remove(p.HostPath)
			return nil, fmt.Errorf("netstack: publish %s: %w", p, err)
		}
		return &published{p: p, stream: l}, nil
	case p.Protocol == UDP:
		c, err := net.ListenUDP(network("udp", p.HostAddr), net.UDPAddrFromAddrPort(p.HostAddr))
		if err != nil {
			return nil, fmt.Errorf("netstack: publish %s: %w (is the port in use?)", p, err)
		}
		p.HostAddr = c.LocalAddr().(*net.UDPAddr).AddrPort()
		return &published{p: p, dgram: c}, nil
	default:
		lc := net.ListenConfig{KeepAlive: -1} // no keep-alive setsockopt after lockdown
		l, err := lc.Listen(context.Background(), network("tcp", p.HostAddr), p.HostAddr.String())
		if err != nil {
			return nil, fmt.Errorf("netstack: publish %s: %w (is the port in use?)", p, err)
		}
		p.HostAddr = l.Addr().(*net.TCPAddr).AddrPort()
		return &published{p: p, stream: l}, nil
	}
}

var _ io.Closer = (*published)(nil)

// Close implements io.Closer.
func (pub *published) Close() error {
	if pub.stream != nil {
		return pub.stream.Close()
	}
	return pub.dgram.Close()
}

// drainer lets published connections deliver what the guest sent them
// before the sandbox's stack goes away (Network.Drain).
type drainer struct {
	once sync.Once
	// start is closed when draining starts.
	start chan struct{}
	// wg counts the published ports' serve loops and their relays.
	wg sync.WaitGroup
}

func newDrainer() *drainer { return &drainer{start: make(chan struct{})} }

// maxPublishedConns bounds the open connections of one published port.
const maxPublishedConns = 4096

// serve relays the port into guest until the listener is closed; ctx ends
// connection attempts in progress. Each relayed connection holds d.
//
// Preconditions: the caller holds d for serve's duration.
func (pub *published) serve(ctx context.Context, guest *stack.Stack, flows *flowSet, d *drainer, relays *gate, logf func(string, ...any)) {
	if pub.dgram != nil {
		pub.serveUDP(ctx, guest, flows, relays, logf)
		return
	}
	var open atomic.Int32
	for {
		c, err := pub.stream.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: back off rather than spin.
			logf("netstack: publish %s: accept: %v", pub.p, err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		host, ok := c.(stream)
		if !ok || open.Load() >= maxPublishedConns {
			c.Close()
			continue
		}
		// Held here, not in the relay: a suspended network's relays
		// must not start, and a held connection is no flow to end.
		relays.wait(ctx.Done())
		open.Add(1)
		d.wg.Add(1)
		relay := func() {
			defer d.wg.Done()
			defer open.Add(-1)
			pub.relayConn(ctx, guest, host, d.start, logf)
		}
		if !flows.run(relay, host) {
			open.Add(-1)
			d.wg.Done()
		}
	}
}

// relayConn connects to the guest port and relays host through it.
// Once drain is closed, the relay ends when the guest's side has.
func (pub *published) relayConn(ctx context.Context, guest *stack.Stack, host stream, drain <-chan struct{}, logf func(string, ...any)) {
	ctx, cancel := context.WithTimeout(ctx, guestDialTimeout)
	var g *gonet.TCPConn
	var err error
	for _, addr := range pub.targets {
		// A refusal inside the stack is immediate; the next address
		// costs microseconds.
		if g, err = gonet.DialContextTCP(ctx, guest, tcpip.FullAddress{Addr: addr, Port: pub.p.GuestPort}, ipv4.ProtocolNumber); err == nil {
			break
		}
	}
	cancel()
	if err != nil {
		// Nothing listens there (yet): the client sees the connection
		// close at once, as with a refused connection behind a proxy.
		logf("netstack: publish %s: connecting to the guest: %v", pub.p, err)
		host.Close()
		return
	}
	relayStreams(drain, host, g)
}
