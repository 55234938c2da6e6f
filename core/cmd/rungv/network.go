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

	"github.com/spf13/pflag"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/netstack"
	"z.gfire.dev/gvx/core/sentry"
)

// netFlags are `rungv run`'s network flags.
type netFlags struct {
	network      string
	publish      []string
	allowNet     []string
	hostLoopback bool
	packetWrite  bool
	dnsUpstream  []string // test only: resolvers for the DNS relay
}

// register adds the network flags to fl.
func (f *netFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.network, "network", "none", "network: none (loopback only) or nat (eth0 10.0.2.15 behind a user-space NAT; DNS at 10.0.2.2)")
	fl.StringArrayVarP(&f.publish, "publish", "p", nil, "publish a guest port: [IP:][HOSTPORT:]GUESTPORT[/tcp|/udp] (IP defaults to 127.0.0.1; without HOSTPORT, or with 0, the host picks a free port and rungv says which) or unix:HOSTPATH:GUESTPORT")
	fl.StringArrayVar(&f.allowNet, "allow-net", nil, "with --network nat, allow only these destinations: CIDR[:PORT], as the guest names them (repeatable; default: all). Link-local addresses (cloud metadata) and the host's own addresses stay refused unless a rule names them: a prefix inside 169.254.0.0/16 or fe80::/10, or exactly the host's address (/32, /128); 0.0.0.0/0 or the host's subnet does not")
	fl.BoolVar(&f.hostLoopback, "host-loopback", false, "with --network nat, let the gateway 10.0.2.2 reach the host's 127.0.0.1")
	fl.BoolVar(&f.packetWrite, "allow-packet-socket-write", false, "let packet sockets send, not only capture (needs --net-raw)")
	fl.StringArrayVar(&f.dnsUpstream, "dns-upstream", nil, "test only: relay DNS to ADDR:PORT instead of the host's resolvers")
	fl.MarkHidden("dns-upstream")
}

// config validates the flags and returns the network's configuration.
func (f *netFlags) config() (netstack.Config, error) {
	var cfg netstack.Config
	switch f.network {
	case "", "none":
		cfg.Mode = netstack.ModeNone
	case "nat":
		cfg.Mode = netstack.ModeNAT
	case "host":
		return cfg, errors.New("--network host: a sandbox never shares the host's network; use --network nat (add --host-loopback to reach the host's 127.0.0.1 as 10.0.2.2)")
	case "bridge", "default", "slirp4netns", "pasta":
		return cfg, fmt.Errorf("--network %s: use --network nat, gvx's user-space NAT", f.network)
	default:
		return cfg, fmt.Errorf("--network %q: use none or nat", f.network)
	}
	if cfg.Mode != netstack.ModeNAT {
		switch {
		case len(f.allowNet) > 0:
			return cfg, errors.New("--allow-net restricts the NAT: add --network nat")
		case f.hostLoopback:
			return cfg, errors.New("--host-loopback needs the NAT: add --network nat")
		case len(f.dnsUpstream) > 0:
			return cfg, errors.New("--dns-upstream needs the NAT: add --network nat")
		}
	}
	cfg.HostLoopback = f.hostLoopback
	for _, s := range f.allowNet {
		r, err := parseAllowNet(s)
		if err != nil {
			return cfg, err
		}
		cfg.Allow = append(cfg.Allow, r)
	}
	for _, s := range f.publish {
		p, err := parsePublish(s)
		if err != nil {
			return cfg, err
		}
		cfg.Publish = append(cfg.Publish, p)
	}
	for _, s := range f.dnsUpstream {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return cfg, fmt.Errorf("--dns-upstream %s: want ADDR:PORT", s)
		}
		cfg.DNSServers = append(cfg.DNSServers, ap)
	}
	return cfg, cfg.Validate()
}

// parseAllowNet parses CIDR[:PORT]: 10.0.0.0/8, 192.0.2.1:443,
// [2001:db8::/32]:443, 2001:db8::1.
func parseAllowNet(s string) (netstack.AllowRule, error) {
	var r netstack.AllowRule
	addr, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return r, fmt.Errorf("--allow-net %s: unclosed [; write [IPV6/BITS]:PORT, e.g. [2001:db8::/32]:443", s)
		}
		addr = s[1:end]
		rest := s[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return r, fmt.Errorf("--allow-net %s: write [IPV6/BITS]:PORT, e.g. [2001:db8::/32]:443", s)
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
			return r, fmt.Errorf("--allow-net %s: want CIDR[:PORT] with an address, e.g. 10.0.0.0/8, 192.0.2.1:443 or [2001:db8::/32]:443; names are not resolved", s)
		}
		prefix = netip.PrefixFrom(a, a.BitLen())
	}
	if prefix != prefix.Masked() {
		return r, fmt.Errorf("--allow-net %s: %s has host bits set; write %s", s, prefix, prefix.Masked())
	}
	r.Prefix = prefix
	if port != "" {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 {
			return r, fmt.Errorf("--allow-net %s: port %q must be 1-65535 (one port per rule; repeat --allow-net for more)", s, port)
		}
		r.Port = uint16(p)
	}
	return r, nil
}

// parsePublish parses -p: unix:HOSTPATH:GUESTPORT or
// [IP:][HOSTPORT:]GUESTPORT[/tcp|/udp], IP defaulting to 127.0.0.1 (an IPv6
// address goes in brackets) and a missing or 0 HOSTPORT meaning one the
// host picks.
func parsePublish(s string) (netstack.Publish, error) {
	var p netstack.Publish
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
		abs, err := filepath.Abs(path)
		if err != nil {
			return p, fmt.Errorf("-p %s: %w", s, err)
		}
		if err := checkSocketPath(abs); err != nil {
			return p, fmt.Errorf("-p %s: %w", s, err)
		}
		if err := checkParentDir(abs); err != nil {
			return p, fmt.Errorf("-p %s: %w", s, err)
		}
		return netstack.Publish{HostPath: abs, Protocol: netstack.TCP, GuestPort: port}, nil
	}
	spec, proto, hasProto := strings.Cut(s, "/")
	p.Protocol = netstack.TCP
	if hasProto {
		switch proto {
		case "tcp":
		case "udp":
			p.Protocol = netstack.UDP
		default:
			return p, fmt.Errorf("-p %s: protocol %q: use /tcp or /udp", s, proto)
		}
	}
	host := "127.0.0.1"
	var hostPort, guestPort string
	if strings.HasPrefix(spec, "[") {
		end := strings.Index(spec, "]:")
		if end < 0 {
			return p, fmt.Errorf("-p %s: write [IPV6]:HOSTPORT:GUESTPORT, e.g. -p [::1]:8080:80", s)
		}
		host = spec[1:end]
		spec = spec[end+2:]
	}
	parts := strings.Split(spec, ":")
	switch {
	case len(parts) == 2:
		hostPort, guestPort = parts[0], parts[1]
	case len(parts) == 3 && !strings.HasPrefix(s, "["):
		host, hostPort, guestPort = parts[0], parts[1], parts[2]
	case len(parts) == 1 && !strings.HasPrefix(s, "["):
		// -p GUESTPORT, as docker takes it: a host port the host chooses.
		guestPort = parts[0]
	default:
		return p, fmt.Errorf("-p %s: write [IP:][HOSTPORT:]GUESTPORT[/tcp|/udp] or unix:HOSTPATH:GUESTPORT", s)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return p, fmt.Errorf("-p %s: host address %q: give an IP address, e.g. 127.0.0.1", s, host)
	}
	var hp uint16
	if hostPort != "" && hostPort != "0" {
		// Empty or 0: the host chooses (the sandbox's info and, unless
		// -q, stderr say which).
		if hp, err = parsePort(hostPort); err != nil {
			return p, fmt.Errorf("-p %s: host port: %w", s, err)
		}
	}
	if p.GuestPort, err = parsePort(guestPort); err != nil {
		return p, fmt.Errorf("-p %s: guest port: %w", s, err)
	}
	p.HostAddr = netip.AddrPortFrom(ip, hp)
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
func openNetwork(f *netFlags, logf func(string, ...any)) (*sandboxNetwork, error) {
	cfg, err := f.config()
	if err != nil {
		return nil, err
	}
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

// check validates the network flags early (before an image is pulled)
// and sets the kernel's packet socket option.
func (f *netFlags) check(cfg *sentry.Config) error {
	if f.packetWrite && !cfg.NetRaw {
		return errors.New("--allow-packet-socket-write: packet sockets need --net-raw; add it")
	}
	cfg.AllowPacketSocketWrite = f.packetWrite
	_, err := f.config()
	return err
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
