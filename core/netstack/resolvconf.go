package netstack

import (
	"bufio"
	"bytes"
	"net/netip"
	"strings"
)

// GuestResolvConfPath is where the guest's resolver reads its
// configuration.
const GuestResolvConfPath = "/etc/resolv.conf"

// GuestResolvConf returns the /etc/resolv.conf a NAT sandbox gets,
// "nameserver 10.0.2.2", and whether to write it over what the image has.
// current is the image's file and exists whether there is one (following
// symlinks: a dangling link counts as missing).
//
// The rule: the file is written when it is missing, when it names no
// nameserver at all (Docker images ship an empty placeholder, as Docker
// bind-mounts its own over it), or when every nameserver it names is a
// loopback address (a copy of a host's systemd-resolved or dnsmasq stub:
// nothing listens there inside the sandbox). A file that names a real
// nameserver is the image's choice and is left alone; the NAT dials that
// server if the allowlist lets it.
func GuestResolvConf(current []byte, exists bool) ([]byte, bool) {
	content := []byte("# written by gvx: the sandbox's gateway relays DNS to the host's resolvers\nnameserver " + GatewayAddr.String() + "\n")
	if !exists {
		return content, true
	}
	sc := bufio.NewScanner(bytes.NewReader(current))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil || !a.Unmap().IsLoopback() {
			// An unparsable name is the image's business too.
			return nil, false
		}
	}
	return content, true
}
