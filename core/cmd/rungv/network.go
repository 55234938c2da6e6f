package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/netstack"
	"z.gfire.dev/gvx/core/sentry"
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

// parsePublish parses -p: unix:HOSTPATH:GUESTPORT or
// [IP:][HOSTPORT:]GUESTPORT[/tcp|/udp], IP defaulting to 127.0.0.1 (an IPv6
// address goes in brackets) and a missing or 0 HOSTPORT meaning one the
// host picks. The host path is checked later, with the spec's ports.
func parsePublish(s string) (spec.Port, error) {
	var p spec.Port
	if rest, ok := strings.CutPrefix(s, "unix:"); ok {
		i := strings.LastIndex(rest, ":")
		if i <= 0 {
			return p, fmt.Errorf("-p %s: write unix:HOSTPATH:GUESTPORT, e.g. -p unix:/tmp/docker.sock:2375", s)
		}
		path, guest := rest[:i], rest[i+1:]
		if strings.HasSuffix(guest, "/udp") {
			return p, fmt.Errorf("-p %s: a unix socket carries TCP only; drop /udp", s)
		}
		port, err := parsePort(strings.TrimSuffix(guest, "/tcp"))
		if err != nil {
			return p, fmt.Errorf("-p %s: guest port: %w", s, err)
		}
		return spec.Port{HostPath: path, GuestPort: port}, nil
	}
	addr, proto, hasProto := strings.Cut(s, "/")
	if hasProto {
		switch proto {
		case "tcp":
		case "udp":
			p.Protocol = "udp"
		default:
			return p, fmt.Errorf("-p %s: protocol %q: use /tcp or /udp", s, proto)
		}
	}
	var hostPort, guestPort string
	if strings.HasPrefix(addr, "[") {
		end := strings.Index(addr, "]:")
		if end < 0 {
			return p, fmt.Errorf("-p %s: write [IPV6]:HOSTPORT:GUESTPORT, e.g. -p [::1]:8080:80", s)
		}
		p.HostIP = addr[1:end]
		addr = addr[end+2:]
	}
	parts := strings.Split(addr, ":")
	switch {
	case len(parts) == 2:
		hostPort, guestPort = parts[0], parts[1]
	case len(parts) == 3 && !strings.HasPrefix(s, "["):
		p.HostIP, hostPort, guestPort = parts[0], parts[1], parts[2]
	case len(parts) == 1 && !strings.HasPrefix(s, "["):
		// -p GUESTPORT, as docker takes it: a host port the host chooses.
		guestPort = parts[0]
	default:
		return p, fmt.Errorf("-p %s: write [IP:][HOSTPORT:]GUESTPORT[/tcp|/udp] or unix:HOSTPATH:GUESTPORT", s)
	}
	if p.HostIP != "" {
		if _, err := netip.ParseAddr(p.HostIP); err != nil {
			return p, fmt.Errorf("-p %s: host address %q: give an IP address, e.g. 127.0.0.1", s, p.HostIP)
		}
	}
	var err error
	if hostPort != "" && hostPort != "0" {
		// Empty or 0: the host chooses (the sandbox's info and, unless
		// -q, stderr say which).
		if p.HostPort, err = parsePort(hostPort); err != nil {
			return p, fmt.Errorf("-p %s: host port: %w", s, err)
		}
	}
	if p.GuestPort, err = parsePort(guestPort); err != nil {
		return p, fmt.Errorf("-p %s: guest port: %w", s, err)
	}
	return p, nil
}

func parsePort(s string) (uint16, error) {
	if strings.Contains(s, "-") {
		return 0, fmt.Errorf("%q: port ranges are not supported; publish one port per -p", s)
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q: want a port number 1-65535", s)
	}
	return uint16(n), nil
}

// sandboxNetwork is the network of a sandbox being run.
type sandboxNetwork struct {
	*netstack.Network
	requested []netstack.Publish // as -p gave them, in order
}

// openNetwork opens the network's host side (listeners, resolvers) before
// the sandbox exists. logf receives refused flows and relay errors.
func openNetwork(cfg netstack.Config, logf func(string, ...any)) (*sandboxNetwork, error) {
	cfg.Logf = logf
	n, err := netstack.New(cfg)
	if err != nil {
		return nil, err
	}
	return &sandboxNetwork{n, cfg.Publish}, nil
}

// configure wires the network into the sandbox's configuration.
func (n *sandboxNetwork) configure(cfg *sentry.Config) {
	cfg.ConfigureNetwork = n.Attach
	cfg.Lockdown.Net = n.LockdownNet()
}

// ports returns the published ports as bound.
func (n *sandboxNetwork) ports() []control.PublishedPort {
	var out []control.PublishedPort
	for _, p := range n.Published() {
		pp := control.PublishedPort{HostPath: p.HostPath, GuestPort: p.GuestPort, Protocol: "tcp"}
		if p.Protocol == netstack.UDP {
			pp.Protocol = "udp"
		}
		if p.HostPath == "" {
			pp.HostIP, pp.HostPort = p.HostAddr.Addr().String(), p.HostAddr.Port()
		}
		out = append(out, pp)
	}
	return out
}

// announceChosenPorts writes the host ports the host chose (-p GUESTPORT,
// -p IP::GUESTPORT) to w, as the caller cannot know them otherwise.
func (n *sandboxNetwork) announceChosenPorts(w io.Writer) {
	for i, p := range n.Published() {
		if i < len(n.requested) && n.requested[i].HostPath == "" && n.requested[i].HostAddr.Port() == 0 {
			fmt.Fprintf(w, "rungv: published %s -> %d/%s\n", p.HostAddr, p.GuestPort, p.Protocol)
		}
	}
}

// janitorFiles returns the unix sockets the janitor must remove.
func (n *sandboxNetwork) janitorFiles() ([]janitorFile, error) {
	var out []janitorFile
	for _, path := range n.SocketPaths() {
		id, err := identify(path)
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}

// prepareGuest gives a NAT sandbox's image the resolver configuration
// the gateway serves (netstack.GuestResolvConf has the rule). It runs
// before Start; a file it cannot write is reported, not fatal.
func (n *sandboxNetwork) prepareGuest(ctx context.Context, sb *sentry.Sandbox) {
	if n.Mode() != netstack.ModeNAT {
		return
	}
	current, err := sb.ReadFile(ctx, netstack.GuestResolvConfPath)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(os.Stderr, "rungv: warning: reading the image's %s: %v; leaving it alone\n", netstack.GuestResolvConfPath, err)
		return
	}
	content, write := netstack.GuestResolvConf(current, exists)
	if !write {
		return
	}
	if err := sb.WriteFile(ctx, netstack.GuestResolvConfPath, content, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "rungv: warning: writing %s: %v; DNS in the sandbox needs \"nameserver %s\" there\n", netstack.GuestResolvConfPath, err, netstack.GatewayAddr)
	}
}

// debugLogf reports the network's refused flows and relay errors on
// stderr with --debug, and nowhere otherwise: stderr is the guest
// command's too.
func debugLogf(debug bool) func(string, ...any) {
	if !debug {
		return nil
	}
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "rungv: "+format+"\n", args...)
	}
}
