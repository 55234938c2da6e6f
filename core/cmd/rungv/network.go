package main

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"

	"z.gfire.dev/gvx/core/netstack"
	"z.gfire.dev/gvx/core/spec"
)

// networkConfig returns the configuration of sp's network, which
// spec.Validate has passed, checking the allow rules and the published
// unix sockets' paths on this host. dns are the test-only DNS relays
// (--dns-upstream).
func networkConfig(sp *spec.Sandbox, dns []netip.AddrPort) (netstack.Config, error) {
	cfg := netstack.Config{Mode: netstack.ModeNone, HostLoopback: sp.HostLoopback}
	if sp.Network == spec.NetworkNAT {
		cfg.Mode = netstack.ModeNAT
	}
	for i, s := range sp.AllowNet {
		field := fmt.Sprintf("allow_net[%d]", i)
		r, err := parseAllowNet(s)
		if err != nil {
			return cfg, &fieldError{field, fmt.Sprintf("%q", s), err.Error(), err}
		}
		one := netstack.Config{Mode: netstack.ModeNAT, HostLoopback: sp.HostLoopback, Allow: []netstack.AllowRule{r}}
		if err := one.Validate(); err != nil {
			return cfg, &fieldError{field, "", strings.TrimPrefix(err.Error(), "netstack: "), err}
		}
		cfg.Allow = append(cfg.Allow, r)
	}
	for i, p := range sp.Ports {
		pub, err := publishOf(p)
		if err != nil {
			return cfg, &fieldError{fmt.Sprintf("ports[%d].host_path", i), "", err.Error(), err}
		}
		cfg.Publish = append(cfg.Publish, pub)
	}
	if len(dns) > 0 && cfg.Mode != netstack.ModeNAT {
		return cfg, errors.New("--dns-upstream needs the NAT: add --network nat (or network \"nat\" to the spec)")
	}
	cfg.DNSServers = dns
	return cfg, cfg.Validate()
}

// publishOf returns the netstack's form of a published port, which
// spec.Validate has passed: a unix socket's path made absolute and checked
// on this host, a missing host address 127.0.0.1.
func publishOf(p spec.Port) (netstack.Publish, error) {
	pub := netstack.Publish{Protocol: netstack.TCP, GuestPort: p.GuestPort}
	if p.Protocol == "udp" {
		pub.Protocol = netstack.UDP
	}
	if p.HostPath != "" {
		abs, err := filepath.Abs(p.HostPath)
		if err == nil {
			err = checkSocketPath(abs)
		}
		if err == nil {
			err = checkParentDir(abs)
		}
		pub.HostPath = abs
		return pub, err
	}
	ip := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if p.HostIP != "" {
		var err error
		if ip, err = netip.ParseAddr(p.HostIP); err != nil {
			return pub, err
		}
	}
	pub.HostAddr = netip.AddrPortFrom(ip, p.HostPort)
	return pub, nil
}

// parseAllowNet parses CIDR[:PORT]: 10.0.0.0/8, 192.0.2.1:443,
// [2001:db8::/32]:443, 2001:db8::1. Its errors say what is wrong with s,
// after s.
func parseAllowNet(s string) (netstack.AllowRule, error) {
	var r netstack.AllowRule
	addr, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return r, errors.New("has an unclosed [; write [IPV6/BITS]:PORT, e.g. [2001:db8::/32]:443")
		}
		addr = s[1:end]
		rest := s[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return r, errors.New("is not [IPV6/BITS]:PORT; write one such as [2001:db8::/32]:443")
			}
			port = rest[1:]
		}
	case strings.Count(s, ":") == 1:
		addr, port, _ = strings.Cut(s, ":")
	}
	prefix, err := netip.ParsePrefix(addr)
	if err != nil {
		a, aerr := netip.ParseAddr(addr)
		if aerr != nil {
			return r, errors.New("is not CIDR[:PORT] with an address; write one such as 10.0.0.0/8, 192.0.2.1:443 or [2001:db8::/32]:443 (names are not resolved)")
		}
		prefix = netip.PrefixFrom(a, a.BitLen())
	}
	if prefix != prefix.Masked() {
		return r, fmt.Errorf("has host bits set; write %s", prefix.Masked())
	}
	r.Prefix = prefix
	if port != "" {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 {
			return r, fmt.Errorf("has port %q, which must be 1-65535 (one port per rule; give more rules for more)", port)
		}
		r.Port = uint16(p)
	}
	return r, nil
}
