package netstack

import (
	"net/netip"
	"strings"
	"testing"
)

func TestPolicy(t *testing.T) {
	host := netip.MustParseAddr("192.0.2.2")
	def := NewPolicy(nil, false, []netip.Addr{host})
	loop := NewPolicy(nil, true, nil)
	listed := NewPolicy([]AllowRule{
		{Prefix: netip.MustParsePrefix("10.0.2.2/32"), Port: 8080},
		{Prefix: netip.MustParsePrefix("198.51.100.0/24")},
		{Prefix: netip.MustParsePrefix("203.0.113.9/32"), Port: 443},
		{Prefix: netip.MustParsePrefix("169.254.169.254/32")},
	}, true, []netip.Addr{host})
	ap := netip.MustParseAddrPort
	cases := []struct {
		p      *Policy
		dst    string
		target string // "" refused, "dns" for the relay
	}{
		{def, "10.0.2.2:53", "dns"},
		{def, "10.0.2.2:8080", ""},
		{loop, "10.0.2.2:8080", "127.0.0.1:8080"},
		{loop, "10.0.2.2:53", "dns"},
		{def, "198.51.100.1:80", "198.51.100.1:80"},
		{def, "[::ffff:198.51.100.1]:80", "198.51.100.1:80"},
		{def, "192.0.2.2:22", ""},       // the host's own address
		{def, "169.254.169.254:80", ""}, // link-local: metadata services
		{def, "127.0.0.1:80", ""},       // loopback never leaves the guest
		{def, "0.0.0.0:80", ""},         // would reach the host
		{def, "0.1.2.3:80", ""},         // "this network"
		{def, "255.255.255.255:67", ""}, // broadcast
		{def, "224.0.0.251:5353", ""},   // multicast
		{def, "10.0.2.3:80", ""},        // no such host on the subnet
		{def, "198.51.100.1:0", ""},     // port 0
		{listed, "10.0.2.2:8080", "127.0.0.1:8080"},
		{listed, "10.0.2.2:8081", ""},
		{listed, "198.51.100.77:1", "198.51.100.77:1"},
		{listed, "203.0.113.9:443", "203.0.113.9:443"},
		{listed, "203.0.113.9:80", ""},
		{listed, "203.0.113.10:443", ""},
		{listed, "169.254.169.254:80", "169.254.169.254:80"}, // listed explicitly
		{listed, "10.0.2.2:53", "dns"},
	}
	for _, c := range cases {
		target, dns, err := c.p.Decide(ap(c.dst))
		got := ""
		switch {
		case err != nil:
		case dns:
			got = "dns"
		default:
			got = target.String()
		}
		if got != c.target {
			t.Errorf("%s (allow %v, host loopback %v): got %q (%v), want %q", c.dst, c.p.allow, c.p.hostLoopback, got, err, c.target)
		}
	}
}

// TestCoveringRulesKeepLinkLocalAndHostClosed: a rule that covers the
// metadata service or a host address (everything, the host's own subnet)
// does not open it; only a rule that names it does.
func TestCoveringRulesKeepLinkLocalAndHostClosed(t *testing.T) {
	host4 := netip.MustParseAddr("192.0.2.2")
	host6 := netip.MustParseAddr("2001:db8::2")
	hosts := []netip.Addr{host4, host6}
	rules := func(ss ...string) []AllowRule {
		var out []AllowRule
		for _, s := range ss {
			out = append(out, AllowRule{Prefix: netip.MustParsePrefix(s)})
		}
		return out
	}
	covering := NewPolicy(rules("0.0.0.0/0", "::/0", "192.0.2.0/24", "169.254.0.0/15", "fe80::/9"), false, hosts)
	naming := NewPolicy(append(rules("169.254.169.254/32", "fe80::/10", "192.0.2.2/32", "2001:db8::2/128"),
		AllowRule{Prefix: netip.MustParsePrefix("169.254.0.0/16"), Port: 8080}), false, hosts)
	cases := []struct {
		p     *Policy
		dst   string
		allow bool
		why   string // in the refusal
	}{
		{covering, "169.254.169.254:80", false, "--allow-net 169.254.169.254/32"},
		{covering, "169.254.1.1:80", false, "link-local"},
		{covering, "[fe80::1]:80", false, "--allow-net fe80::1/128"},
		{covering, "192.0.2.2:22", false, "--allow-net 192.0.2.2/32"},
		{covering, "[2001:db8::2]:22", false, "--allow-net 2001:db8::2/128"},
		{covering, "192.0.2.3:22", true, ""}, // the host's neighbour on its subnet
		{covering, "198.51.100.1:443", true, ""},
		{naming, "169.254.169.254:80", true, ""},
		{naming, "[fe80::1]:80", true, ""},
		{naming, "169.254.1.1:8080", true, ""},
		{naming, "169.254.1.1:80", false, "not on the allowlist"},
		{naming, "192.0.2.2:22", true, ""},
		{naming, "[2001:db8::2]:22", true, ""},
		{naming, "192.0.2.3:22", false, "not on the allowlist"},
	}
	for _, c := range cases {
		_, _, err := c.p.Decide(netip.MustParseAddrPort(c.dst))
		switch {
		case c.allow && err != nil:
			t.Errorf("%s (allow %v): refused: %v", c.dst, c.p.allow, err)
		case !c.allow && err == nil:
			t.Errorf("%s (allow %v): let through, want refused", c.dst, c.p.allow)
		case !c.allow && !strings.Contains(err.Error(), c.why):
			t.Errorf("%s (allow %v): %v, want it to say %q", c.dst, c.p.allow, err, c.why)
		}
	}
}

func TestAllowRuleValidationSaysWhatToWrite(t *testing.T) {
	cases := []struct {
		rule         string
		hostLoopback bool
		want         string
	}{
		{"127.0.0.1/32", true, "--host-loopback --allow-net 10.0.2.2"},
		{"10.0.2.2/32", false, "add it"},
		{"10.0.2.0/24", false, "add it"},
	}
	for _, c := range cases {
		err := AllowRule{Prefix: netip.MustParsePrefix(c.rule)}.validate(c.hostLoopback)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.rule, err, c.want)
		}
	}
	for _, ok := range []string{"0.0.0.0/0", "10.0.0.0/8", "::/0"} {
		if err := (AllowRule{Prefix: netip.MustParsePrefix(ok)}).validate(false); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	bad := []struct {
		cfg  Config
		want string
	}{
		{Config{Mode: "bridge"}, `use "none" or "nat"`},
		{Config{HostLoopback: true}, "need ModeNAT"},
		{Config{Allow: []AllowRule{{Prefix: netip.MustParsePrefix("0.0.0.0/0")}}}, "need ModeNAT"},
		{Config{Publish: []Publish{{HostPath: "/x", Protocol: UDP, GuestPort: 1}}}, "TCP only"},
		{Config{Publish: []Publish{{HostAddr: netip.MustParseAddrPort("127.0.0.1:1")}}}, "must not be 0"},
		{Config{Publish: []Publish{{GuestPort: 1}}}, "no host address"},
		{Config{Mode: ModeNAT, DNSServers: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")}}, "needs an address and a port"},
	}
	for _, c := range bad {
		if _, err := c.cfg.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	pubs := []Publish{{HostAddr: netip.MustParseAddrPort("127.0.0.1:1"), GuestPort: 1}}
	cfg, err := Config{Publish: pubs}.validate()
	if err != nil || cfg.Mode != ModeNone || cfg.Publish[0].Protocol != TCP || pubs[0].Protocol != "" {
		t.Fatalf("defaults: %+v %v (the caller's slice must stay as it was)", cfg, err)
	}
}

func TestGuestResolvConf(t *testing.T) {
	cases := []struct {
		current string
		exists  bool
		write   bool
	}{
		{"", false, true},
		{"", true, true}, // Docker's empty placeholder
		{"# placeholder\nsearch example.org\n", true, true},
		{"nameserver 127.0.0.53\noptions edns0\n", true, true}, // a host's systemd-resolved stub
		{"nameserver 127.0.0.11\nnameserver ::1\n", true, true},
		{"nameserver 192.0.2.53\n", true, false}, // the image's choice
		{"nameserver 127.0.0.53\nnameserver 192.0.2.53\n", true, false},
		{"nameserver resolver.example\n", true, false},
	}
	for _, c := range cases {
		content, write := GuestResolvConf([]byte(c.current), c.exists)
		if write != c.write {
			t.Errorf("%q (exists %v): write %v, want %v", c.current, c.exists, write, c.write)
		}
		if write && !strings.Contains(string(content), "\nnameserver 10.0.2.2\n") {
			t.Errorf("content %q", content)
		}
	}
}

func TestParseNameservers(t *testing.T) {
	got := parseNameservers([]byte("# c\nnameserver 10.255.255.53\nsearch x\nnameserver fe80::1%eth0\nnameserver bogus\nnameserver ::1\nnameserver 192.0.2.1\n"))
	want := []string{"10.255.255.53:53", "[fe80::1%eth0]:53", "[::1]:53"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

// TestAllowlistedNetworkKnowsTheHostsAddresses: New gives the policy the
// host's addresses with an allowlist too, so a covering rule cannot open
// them. Decide only decides; nothing is dialed.
func TestAllowlistedNetworkKnowsTheHostsAddresses(t *testing.T) {
	var own netip.Addr
	for _, a := range hostAddrs() {
		if !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			own = a
			break
		}
	}
	if !own.IsValid() {
		t.Skip("the host has no address but loopback and link-local")
	}
	n, err := New(Config{Mode: ModeNAT, Allow: []AllowRule{
		{Prefix: netip.MustParsePrefix("0.0.0.0/0")},
		{Prefix: netip.MustParsePrefix("::/0")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, _, err := n.policy.Decide(netip.AddrPortFrom(own, 22)); err == nil || !strings.Contains(err.Error(), "address of the host") {
		t.Fatalf("%s, the host's own address, under --allow-net 0.0.0.0/0 and ::/0: %v, want refused", own, err)
	}
}
