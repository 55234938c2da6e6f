package netstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/cleanup"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"z.gfire.dev/gvx/core/lockdown"
)

// Network is one sandbox's network: the host listeners of its published
// ports, and once attached to the guest's stack, eth0 and the NAT.
type Network struct {
	cfg    Config
	policy *Policy
	dns    []netip.AddrPort
	pubs   []*published
	dial   dialFunc // hostDial; tests redirect it
	flows  *flowSet
	drain  *drainer
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	attached bool
	closed   bool
	nat      *nat
	wire     [2]*wireEnd // guest end, NAT end
	// relays holds new relays into the guest while suspended.
	relays gate
}

// Suspend ends every connection and UDP flow in progress through the
// published ports and the NAT, waits until their relays have let go of the
// guest's sockets, and holds new ones until Resume; the ports stay open
// and queue new connections. It may come before Attach. A checkpoint
// suspends the network (a relay waiting on a guest socket cannot be saved,
// and its host side could not be restored anyway), and so does a restore
// until the guest is ready (its snapshot hook has run).
func (n *Network) Suspend() {
	n.relays.close()
	n.flows.closeFlows(func(c io.Closer) bool {
		_, listener := c.(*published)
		return listener
	})
}

// Resume lets the connections Suspend held through.
func (n *Network) Resume() { n.relays.open() }

// New validates cfg and opens everything on the host the network will
// need: the published ports' listeners and sockets, the host's resolvers
// (from /etc/resolv.conf unless cfg.DNSServers is set) and the host's own
// addresses for the default policy. Call it before the process locks
// itself down; nothing after it opens a host file.
func New(cfg Config) (*Network, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	n := &Network{cfg: cfg, dial: hostDial, flows: newFlowSet(), drain: newDrainer()}
	cu := cleanup.Make(func() {
		n.closeListeners()
		for _, path := range n.SocketPaths() {
			os.Remove(path) // not locked down yet
		}
	})
	defer cu.Clean()
	for _, p := range cfg.Publish {
		pub, err := listen(p)
		if err != nil {
			return nil, err
		}
		n.pubs = append(n.pubs, pub)
	}
	if cfg.Mode == ModeNAT {
		// The host's addresses stay refused under an allowlist too,
		// unless a rule names one exactly (see Policy).
		n.policy = NewPolicy(cfg.Allow, cfg.HostLoopback, hostAddrs())
		n.dns = cfg.DNSServers
		if n.dns == nil {
			n.dns = hostNameservers()
		}
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	cu.Release()
	return n, nil
}

// Attach adds the network to the guest's root stack and starts serving
// the published ports. It has the type of sentry.Config.ConfigureNetwork
// and may be called once.
func (n *Network) Attach(s *stack.Stack) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.closed:
		return errors.New("netstack: the network is closed")
	case n.attached:
		return errors.New("netstack: the network is attached already; a Network serves one sandbox")
	}
	if n.cfg.Mode == ModeNAT {
		if err := n.attachNATLocked(s); err != nil {
			return err
		}
	}
	n.attached = true
	targets := []tcpip.Address{guestLoopback}
	if n.cfg.Mode == ModeNAT {
		targets = append(targets, tcpipAddr(GuestAddr))
	}
	for _, pub := range n.pubs {
		pub.targets = targets
		n.drain.wg.Add(1)
		serve := func() {
			defer n.drain.wg.Done()
			pub.serve(n.ctx, s, n.flows, n.drain, &n.relays, n.cfg.Logf)
		}
		if !n.flows.run(serve, pub) {
			n.drain.wg.Done()
		}
	}
	return nil
}

// attachNATLocked creates the wire, eth0 on s and the NAT stack.
//
// Preconditions: n.mu is held.
func (n *Network) attachNATLocked(s *stack.Stack) error {
	guestEnd, natEnd := newWire(MTU+14, guestMAC, gatewayMAC)
	cu := cleanup.Make(func() { guestEnd.Close(); natEnd.Close() })
	defer cu.Clean()
	// Checksums: the guest computes none for eth0 and verifies none (the
	// NAT stack's are right); the NAT stack computes its own and trusts
	// what comes off the wire. Forwarded packets (a Docker bridge in the
	// guest) thus carry correct checksums into the guest's other stacks.
	guestEnd.caps = stack.CapabilityTXChecksumOffload | stack.CapabilityRXChecksumOffload
	natEnd.caps = stack.CapabilityRXChecksumOffload
	nt, err := newNAT(n.ctx, natEnd, n.policy, n.dns, n.dial, n.flows, n.cfg.Logf)
	if err != nil {
		return err
	}
	cu.Add(nt.close)
	if err := addEth0(s, guestEnd); err != nil {
		return err
	}
	cu.Release()
	n.nat = nt
	n.wire = [2]*wireEnd{guestEnd, natEnd}
	return nil
}

// LockdownNet returns the host socket access the network needs after
// lockdown (lockdown.Options.Net).
func (n *Network) LockdownNet() lockdown.NetAccess {
	switch {
	case n.cfg.Mode == ModeNAT:
		return lockdown.NetNAT
	case len(n.pubs) > 0:
		return lockdown.NetPublish
	}
	return lockdown.NetNone
}

// Mode returns the network's mode.
func (n *Network) Mode() Mode { return n.cfg.Mode }

// Published returns the published ports with their actual host addresses
// (a port 0 replaced by the one the host chose).
func (n *Network) Published() []Publish {
	out := make([]Publish, len(n.pubs))
	for i, pub := range n.pubs {
		out[i] = pub.p
	}
	return out
}

// SocketPaths returns the unix socket files New created. The process
// cannot remove them once locked down; its caller must (rungv's janitor).
func (n *Network) SocketPaths() []string {
	var out []string
	for _, pub := range n.pubs {
		if pub.p.HostPath != "" {
			out = append(out, pub.p.HostPath)
		}
	}
	return out
}

// DNSServers returns the resolvers the DNS relay uses.
func (n *Network) DNSServers() []netip.AddrPort { return n.dns }

// Close stops serving, ends every relayed connection and flow, and stops
// the NAT stack. The guest's stack, eth0 included, belongs to the Sentry.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	nt, wire := n.nat, n.wire
	n.mu.Unlock()
	n.cancel()
	n.closeListeners()
	n.flows.close()
	if nt != nil {
		nt.close()
	}
	for _, w := range wire {
		if w != nil {
			w.Close()
		}
	}
	return nil
}

// Drain stops accepting on the published ports and gives the connections
// they relay up to timeout to deliver what the guest sent them before it
// went away; Close ends whatever is left. Call it once the guest's
// processes have exited and before its stack is destroyed
// (sentry.Sandbox.Close): destroying the stack resets the guest's end of
// a relayed connection, and bytes the guest wrote just before exiting
// would never reach the host.
func (n *Network) Drain(timeout time.Duration) {
	n.closeListeners()
	n.drain.once.Do(func() { close(n.drain.start) })
	done := make(chan struct{})
	go func() {
		n.drain.wg.Wait() // Close, if not the relays, ends the wait
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// closeListeners closes the published ports' host sockets.
func (n *Network) closeListeners() {
	for _, pub := range n.pubs {
		pub.Close()
	}
}

// String describes the network for logs.
func (n *Network) String() string {
	s := string(n.cfg.Mode)
	for _, pub := range n.pubs {
		s += fmt.Sprintf(" -p %s", pub.p)
	}
	return s
}
