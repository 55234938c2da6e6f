package main

// Parsing of the network flags, and errors that say what to write instead.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNetworkFlagErrorsSayWhatToWrite(t *testing.T) {
	cases := []struct {
		flags []string
		want  string
	}{
		{[]string{"--network", "host"}, "use --network nat"},
		{[]string{"--network", "bridge"}, "use --network nat"},
		{[]string{"--network", "tap"}, `use "none" or "nat"`},
		{[]string{"--network", "none", "--allow-net", "10.0.0.0/8"}, "add --network nat"},
		{[]string{"--network", "none", "--host-loopback"}, "add --network nat"},
		{[]string{"--network", "nat", "--allow-net", "example.com"}, "names are not resolved"},
		{[]string{"--network", "nat", "--allow-net", "10.0.0.1/8"}, "write 10.0.0.0/8"},
		{[]string{"--network", "nat", "--allow-net", "10.0.0.0/8:0"}, "1-65535"},
		{[]string{"--network", "nat", "--allow-net", "127.0.0.1"}, "--host-loopback --allow-net 10.0.2.2"},
		{[]string{"--network", "nat", "--allow-net", "10.0.2.2:80"}, "add it"},
		{[]string{"-p", "[::1]:8080"}, "write [IP:][HOSTPORT:]GUESTPORT"},
		{[]string{"-p", "8080-8090:80"}, "one port per -p"},
		{[]string{"-p", "8080:80/sctp"}, "use /tcp or /udp"},
		{[]string{"-p", "unix:/tmp/x.sock:80/udp"}, "drop /udp"},
		{[]string{"-p", "unix:/tmp/x.sock"}, "unix:HOSTPATH:GUESTPORT"},
		{[]string{"-p", "localhost:8080:80"}, "give an IP address"},
		{[]string{"-p", "127.0.0.1:80:0"}, "1-65535"},
		{[]string{"-p", "127.0.0.1:70000:80"}, "1-65535"},
		{[]string{"--allow-packet-socket-write"}, "add it"},
	}
	for _, c := range cases {
		if err := cliError(t, append(c.flags, "img")...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %q", c.flags, err, c.want)
		}
	}
	sp, _, err := parseRun(t, "--net-raw", "--allow-packet-socket-write", "img")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _, err := planSandbox(&sp, nil); err != nil || !cfg.AllowPacketSocketWrite {
		t.Errorf("--net-raw --allow-packet-socket-write: %v, AllowPacketSocketWrite %v", err, cfg.AllowPacketSocketWrite)
	}
}

func TestNetworkFlagsParse(t *testing.T) {
	args := []string{"--network", "nat", "--host-loopback"}
	for _, r := range []string{"10.0.0.0/8", "192.0.2.1:443", "[2001:db8::/32]:443", "2001:db8::1", "10.0.2.2:8080"} {
		args = append(args, "--allow-net", r)
	}
	for _, p := range []string{"unix:rel.sock:2375", "8080:80", "0.0.0.0:5353:53/udp", "[::1]:8443:443/tcp",
		"9000", "127.0.0.1::9001/udp", "0:9002", "[::1]:0:9003"} { // the last four: the host picks the port
		args = append(args, "-p", p)
	}
	sp, _, err := parseRun(t, append(args, "img")...)
	if err != nil {
		t.Fatal(err)
	}
	_, cfg, err := planSandbox(&sp, nil)
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, r := range cfg.Allow {
		rules = append(rules, r.String())
	}
	if got, want := strings.Join(rules, " "), "10.0.0.0/8 192.0.2.1/32:443 [2001:db8::/32]:443 2001:db8::1/128 10.0.2.2/32:8080"; got != want {
		t.Errorf("allow rules %q, want %q", got, want)
	}
	wd, _ := os.Getwd()
	var pubs []string
	for _, p := range cfg.Publish {
		pubs = append(pubs, p.String())
	}
	if got, want := strings.Join(pubs, " "), "unix:"+filepath.Join(wd, "rel.sock")+":2375 127.0.0.1:8080:80 0.0.0.0:5353:53/udp [::1]:8443:443 "+
		"127.0.0.1:0:9000 127.0.0.1:0:9001/udp 127.0.0.1:0:9002 [::1]:0:9003"; got != want {
		t.Errorf("published %q, want %q", got, want)
	}
}
