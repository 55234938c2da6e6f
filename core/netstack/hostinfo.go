package netstack

import (
	"bufio"
	"bytes"
	"net"
	"net/netip"
	"os"
	"strings"
)

// hostResolvConf is the host file the DNS relay's upstreams come from.
const hostResolvConf = "/etc/resolv.conf"

// maxNameservers is how many nameservers a resolver uses, as glibc's
// MAXNS.
const maxNameservers = 3

// hostAddrs returns the addresses of the host's interfaces now. Errors
// leave the list short; the policy then refuses less by default, which the
// allowlist can still restrict.
func hostAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// hostNameservers reads the nameservers of the host's resolv.conf, at most
// maxNameservers, each on port 53.
func hostNameservers() []netip.AddrPort {
	data, err := os.ReadFile(hostResolvConf)
	if err != nil {
		return nil
	}
	return parseNameservers(data)
}

// parseNameservers returns the addresses of resolv.conf's nameserver
// lines, on port 53, at most maxNameservers.
func parseNameservers(data []byte) []netip.AddrPort {
	var out []netip.AddrPort
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() && len(out) < maxNameservers {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil {
			continue
		}
		out = append(out, netip.AddrPortFrom(a.Unmap(), DNSPort))
	}
	return out
}
