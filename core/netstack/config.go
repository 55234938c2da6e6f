package netstack

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"
)

// MaxUnixPath is the longest unix socket path a socket can bind or dial:
// sun_path's size less the terminating NUL.
const MaxUnixPath = len(unix.RawSockaddrUnix{}.Path) - 1

// Mode is the kind of network a sandbox has.
type Mode string

// Modes.
const (
	// ModeNone gives the guest its loopback interface only: no route
	// leaves the sandbox. Published ports still reach guest services.
	ModeNone Mode = "none"
	// ModeNAT adds eth0 behind the user-space NAT.
	ModeNAT Mode = "nat"
)

// The sandbox's addresses, as QEMU's and slirp4netns's user networking
// number them.
var (
	// Subnet is eth0's network.
	Subnet = netip.MustParsePrefix("10.0.2.0/24")
	// GuestAddr is eth0's address.
	GuestAddr = netip.MustParseAddr("10.0.2.15")
	// GatewayAddr is the default gateway, the DNS server, and, with
	// Config.HostLoopback, the host's 127.0.0.1.
	GatewayAddr = netip.MustParseAddr("10.0.2.2")
)

// Link parameters of eth0.
const (
	// GuestNIC is the guest's name of the interface.
	GuestNIC = "eth0"
	// MTU is eth0's MTU. 65520, as slirp4netns uses: nothing on the wire
	// limits it, and large segments keep the per-byte cost of two stacks
	// low.
	MTU = 65520
	// DNSPort is where the gateway answers DNS.
	DNSPort = 53
)

// Protocol is a transport protocol of a published port.
type Protocol string

// Protocols.
const (
	TCP Protocol = "tcp"
	UDP Protocol = "udp"
)

// Publish is a published port: a host endpoint whose connections (TCP,
// unix) or datagrams (UDP) are relayed to a port on the guest's loopback
// (TCP in ModeNAT falls back to eth0's address).
type Publish struct {
	// HostPath, if not empty, is a unix socket path on the host; New
	// creates it (mode 0600) and fails if anything exists there. The
	// guest side is then TCP.
	HostPath string
	// HostAddr is the host address to listen on when HostPath is empty.
	// Port 0 picks a free port (Network.Published reports it).
	HostAddr netip.AddrPort
	// Protocol is TCP or UDP; empty means TCP.
	Protocol Protocol
	// GuestPort is the guest's port.
	GuestPort uint16
}

// String renders p as rungv's -p flag takes it.
func (p Publish) String() string {
	if p.HostPath != "" {
		return fmt.Sprintf("unix:%s:%d", p.HostPath, p.GuestPort)
	}
	s := fmt.Sprintf("%s:%d", p.HostAddr, p.GuestPort)
	if p.Protocol == UDP {
		s += "/udp"
	}
	return s
}

// Config describes a sandbox's network.
type Config struct {
	Mode Mode

	// Allow lists the destinations the guest may reach through the NAT,
	// as the guest names them (the gateway stands for host loopback).
	// Empty means the default: every destination except link-local
	// addresses and the host's own addresses. See Policy.
	Allow []AllowRule

	// HostLoopback makes the gateway, 10.0.2.2, reach the host's
	// 127.0.0.1 (except port 53, the DNS relay). Without it the gateway
	// answers only DNS.
	HostLoopback bool

	// Publish lists the published ports.
	Publish []Publish

	// DNSServers are the resolvers DNS queries to the gateway are relayed
	// to. Nil means the nameservers of the host's /etc/resolv.conf, read
	// by New. Tests point this at their own server.
	DNSServers []netip.AddrPort

	// Logf, if not nil, reports refused flows and relay errors.
	Logf func(format string, args ...any)
}

// Validate reports what is wrong with c, saying what to write instead.
// New validates too.
func (c Config) Validate() error {
	_, err := c.validate()
	return err
}

// validate checks c and returns a copy with defaults filled in.
func (c Config) validate() (Config, error) {
	switch c.Mode {
	case "":
		c.Mode = ModeNone
	case ModeNone, ModeNAT:
	default:
		return c, fmt.Errorf("netstack: unknown mode %q; use %q or %q", c.Mode, ModeNone, ModeNAT)
	}
	if c.Mode != ModeNAT && (len(c.Allow) > 0 || c.HostLoopback || c.DNSServers != nil) {
		return c, errors.New("netstack: an allowlist, host loopback and DNS servers need ModeNAT; set Mode to ModeNAT or drop them")
	}
	for _, r := range c.Allow {
		if err := r.validate(c.HostLoopback); err != nil {
			return c, err
		}
	}
	c.Publish = slices.Clone(c.Publish)
	for i, p := range c.Publish {
		if p.Protocol == "" {
			p.Protocol = TCP
		}
		if err := p.validate(); err != nil {
			return c, err
		}
		c.Publish[i] = p
	}
	for _, s := range c.DNSServers {
		if !s.IsValid() || s.Port() == 0 {
			return c, fmt.Errorf("netstack: DNS server %q needs an address and a port (e.g. 127.0.0.1:53)", s)
		}
	}
	return c, nil
}

func (p Publish) validate() error {
	if p.GuestPort == 0 {
		return fmt.Errorf("netstack: publish %s: the guest port must not be 0", p)
	}
	switch p.Protocol {
	case TCP, UDP:
	default:
		return fmt.Errorf("netstack: publish %s: unknown protocol %q; use tcp or udp", p, p.Protocol)
	}
	if p.HostPath != "" {
		if p.Protocol != TCP {
			return fmt.Errorf("netstack: publish %s: a unix socket carries TCP only", p)
		}
		if len(p.HostPath) > MaxUnixPath {
			return fmt.Errorf("netstack: publish %s: the socket path is %d bytes, more than the %d a unix socket's address holds (sun_path); pick a shorter path, e.g. in /tmp", p, len(p.HostPath), MaxUnixPath)
		}
		return nil
	}
	if !p.HostAddr.IsValid() {
		return fmt.Errorf("netstack: publish to guest port %d: no host address or path", p.GuestPort)
	}
	return nil
}
