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

// Link-local networks; cloud metadata services live at 169.254.169.254.
var (
	linkLocal4 = netip.MustParsePrefix("169.254.0.0/16")
	linkLocal6 = netip.MustParsePrefix("fe80::/10")
)

// namesLinkLocal reports whether r names link-local addresses on purpose:
// its prefix lies inside 169.254.0.0/16 or fe80::/10. A prefix that only
// covers them (0.0.0.0/0, ::/0, 128.0.0.0/1) does not.
func (r AllowRule) namesLinkLocal() bool {
	for _, ll := range []netip.Prefix{linkLocal4, linkLocal6} {
		if r.Prefix.Addr().BitLen() == ll.Addr().BitLen() && r.Prefix.Bits() >= ll.Bits() && ll.Contains(r.Prefix.Addr()) {
			return true
		}
	}
	return false
}

// namesExactly reports whether r's prefix is the single address a.
func (r AllowRule) namesExactly(a netip.Addr) bool {
	return r.Prefix.Bits() == a.BitLen() && r.Prefix.Addr() == a
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
//  4. Link-local addresses (cloud metadata services live at
//     169.254.169.254) and the addresses the host's interfaces had when
//     New ran (dialing them reaches host services as loopback would) are
//     refused unless an allow rule names them on purpose: a link-local
//     address by a rule whose prefix lies inside 169.254.0.0/16 or
//     fe80::/10, a host address by a rule for exactly that address (/32,
//     /128). A prefix that merely covers them (0.0.0.0/0, the host's own
//     subnet) does not, so widening the allowlist never opens them.
//  5. With an allowlist, only what it lists; without one, everything
//     else.
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
	if !p.listed(dst) {
		return target{}, fmt.Errorf("%s is not on the allowlist", dst)
	}
	switch {
	case a.IsLinkLocalUnicast():
		if !p.listedBy(dst, AllowRule.namesLinkLocal) {
			return target{}, fmt.Errorf("%s is link-local (cloud metadata services live there): allow it with --allow-net %s, or a prefix inside %s or %s; one that only covers it, such as 0.0.0.0/0, does not", dst, netip.PrefixFrom(a, a.BitLen()), linkLocal4, linkLocal6)
		}
	case p.hostAddrs[a]:
		named := func(r AllowRule) bool { return r.namesExactly(a) }
		if !p.listedBy(dst, named) {
			return target{}, fmt.Errorf("%s is an address of the host: allow it with --allow-net %s, naming exactly it; a prefix that only covers it, such as 0.0.0.0/0 or the host's subnet, does not", dst, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return target{addr: dst}, nil
}

// listed reports whether the allowlist, if there is one, lets dst through.
func (p *Policy) listed(dst netip.AddrPort) bool {
	return p.allow == nil || p.listedBy(dst, func(AllowRule) bool { return true })
}

// listedBy reports whether a rule of the allowlist that satisfies ok
// matches dst; without an allowlist, none does.
func (p *Policy) listedBy(dst netip.AddrPort, ok func(AllowRule) bool) bool {
	for _, r := range p.allow {
		if r.matches(dst) && ok(r) {
			return true
		}
	}
	return false
}
