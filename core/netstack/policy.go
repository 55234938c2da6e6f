package netstack

import (
	"fmt"
	"net/netip"
	"strconv"
)

// AllowRule lets the guest reach a network, on one port or on all.
type AllowRule struct {
	Prefix netip.Prefix
	// Port is the destination port; 0 means every port.
	Port uint16
}

// String renders r as rungv's --allow-net flag takes it.
func (r AllowRule) String() string {
	if r.Port == 0 {
		return r.Prefix.String()
	}
	if r.Prefix.Addr().Is6() {
		return "[" + r.Prefix.String() + "]:" + strconv.Itoa(int(r.Port))
	}
	return r.Prefix.String() + ":" + strconv.Itoa(int(r.Port))
}

func (r AllowRule) matches(dst netip.AddrPort) bool {
	return r.Prefix.Contains(dst.Addr()) && (r.Port == 0 || r.Port == dst.Port())
}

// validate rejects rules that could never match, saying what to write.
func (r AllowRule) validate(hostLoopback bool) error {
	if !r.Prefix.IsValid() {
		return fmt.Errorf("netstack: allow rule %q has no valid prefix", r)
	}
	a := r.Prefix.Masked().Addr()
	switch {
	case a.Unmap().IsLoopback():
		return fmt.Errorf("netstack: allow rule %s: the guest reaches the host's loopback as the gateway %s; write --host-loopback --allow-net %s/32 (or %s:PORT)", r, GatewayAddr, GatewayAddr, GatewayAddr)
	case r.Prefix.Contains(GatewayAddr) && r.Prefix.Bits() >= Subnet.Bits() && !hostLoopback:
		return fmt.Errorf("netstack: allow rule %s: the gateway forwards to the host's loopback only with --host-loopback; add it", r)
	}
	return nil
}

// Policy decides where guest flows may go. The rules, in order:
//
//  1. The gateway's port 53 is the DNS relay, always.
//  2. Other ports of the gateway go to the host's 127.0.0.1 with
//     HostLoopback (and if the allowlist, when given, lets them);
//     otherwise they are refused.
//  3. Destinations no host socket should be dialed for are refused:
//     loopback, unspecified (0.0.0.0 reaches the host itself),
//     multicast, broadcast and the rest of eth0's subnet.
//  4. With an allowlist, only what it lists; it may name link-local
//     addresses and the host's own addresses explicitly.
//  5. Without one, everything else except link-local addresses (cloud
//     metadata services live at 169.254.169.254) and the addresses the
//     host's interfaces had when New ran (dialing them reaches host
//     services as loopback would).
type Policy struct {
	allow        []AllowRule
	hostLoopback bool
	hostAddrs    map[netip.Addr]bool
}

// NewPolicy returns the policy for an allowlist (empty: the default),
// HostLoopback, and the host's own addresses.
func NewPolicy(allow []AllowRule, hostLoopback bool, hostAddrs []netip.Addr) *Policy {
	if len(allow) == 0 {
		allow = nil // the default policy
	}
	p := &Policy{allow: allow, hostLoopback: hostLoopback, hostAddrs: map[netip.Addr]bool{}}
	for _, a := range hostAddrs {
		p.hostAddrs[a.Unmap().WithZone("")] = true
	}
	return p
}

// target is where the NAT dials a guest flow.
type target struct {
	// addr is the host socket's destination; invalid for DNS.
	addr netip.AddrPort
	// dns marks the DNS relay.
	dns bool
}

// Decide returns where a flow to dst goes, or why it is refused.
func (p *Policy) Decide(dst netip.AddrPort) (netip.AddrPort, bool, error) {
	t, err := p.decide(dst)
	return t.addr, t.dns, err
}

func (p *Policy) decide(dst netip.AddrPort) (target, error) {
	a := dst.Addr().Unmap()
	dst = netip.AddrPortFrom(a, dst.Port())
	if a == GatewayAddr {
		if dst.Port() == DNSPort {
			return target{dns: true}, nil
		}
		if !p.hostLoopback {
			return target{}, fmt.Errorf("%s is the gateway; it reaches the host's loopback only with --host-loopback", dst)
		}
		if !p.listed(dst) {
			return target{}, fmt.Errorf("%s is not on the allowlist", dst)
		}
		return target{addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), dst.Port())}, nil
	}
	switch {
	case dst.Port() == 0:
		return target{}, fmt.Errorf("%s: port 0", dst)
	case a.IsLoopback(), a.IsUnspecified(), a.IsMulticast(), a.IsInterfaceLocalMulticast(),
		a == netip.AddrFrom4([4]byte{255, 255, 255, 255}), a.Is4() && a.As4()[0] == 0:
		return target{}, fmt.Errorf("%s is not a destination the NAT dials", dst)
	case Subnet.Contains(a):
		return target{}, fmt.Errorf("%s: no such host on %s", dst, Subnet)
	}
	if p.allow != nil {
		if !p.listed(dst) {
			return target{}, fmt.Errorf("%s is not on the allowlist", dst)
		}
		return target{addr: dst}, nil
	}
	if a.IsLinkLocalUnicast() {
		return target{}, fmt.Errorf("%s is link-local; allow it explicitly with --allow-net", dst)
	}
	if p.hostAddrs[a] {
		return target{}, fmt.Errorf("%s is an address of the host; allow it explicitly with --allow-net", dst)
	}
	return target{addr: dst}, nil
}

// listed reports whether the allowlist, if there is one, lets dst through.
func (p *Policy) listed(dst netip.AddrPort) bool {
	if p.allow == nil {
		return true
	}
	for _, r := range p.allow {
		if r.matches(dst) {
			return true
		}
	}
	return false
}
