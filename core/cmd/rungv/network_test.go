package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"z.gfire.dev/gvx/core/internal/hoststate"
	"z.gfire.dev/gvx/core/netstack"
	"z.gfire.dev/gvx/core/netstack/netstacktest"
)

func TestNATFromTheGuest(t *testing.T) {
	echo := netstacktest.TCPEcho(t, "host:")
	closed := netstacktest.TCPEcho(t, "not allowed:")
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "web %s", r.URL.Path)
	}))
	defer web.Close()
	webPort := netip.MustParseAddrPort(web.Listener.Addr().String()).Port()
	dns := netstacktest.NewDNSServer(t, map[string]netip.Addr{
		"box.gvx.test": netip.MustParseAddr("192.0.2.7"),
		"web.gvx.test": netstack.GatewayAddr,
	})
	flags := []string{"--network", "nat", "--host-loopback",
		"--allow-net", fmt.Sprintf("10.0.2.2:%d", echo.Port()),
		"--allow-net", fmt.Sprintf("10.0.2.2:%d", webPort),
		"--dns-upstream", dns.Addr.String()}
	script := fmt.Sprintf(`
		echo ping | nc 10.0.2.2 %d
		echo; echo "allowed=$?"
		start=$(date +%%s)
		echo x | nc 10.0.2.2 %d 2>&1; echo "refused=$? after $(( $(date +%%s) - start ))s"
		nslookup box.gvx.test | grep -A1 'Name:'
		wget -q -O - http://web.gvx.test:%d/through-dns-and-nat; echo
		cat /etc/resolv.conf
		echo "netns: $(unshare -n ip -o link | cut -d: -f2 | tr -d ' \n') root: $(ip -o link | cut -d: -f2 | tr -d ' \n')"
	`, echo.Port(), closed.Port(), webPort)
	out, errOut, code := runNet(t, flags, script)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"host:ping\n\nallowed=0",
		"Address: 192.0.2.7",
		"web /through-dns-and-nat",
		"nameserver 10.0.2.2",
		"netns: lo root: loeth0", // a namespace made inside gets its own lo, and only that
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Refused with a RST (nc reports it) at once, not after a timeout.
	if !strings.Contains(out, "refused=1 after 0s") && !strings.Contains(out, "refused=1 after 1s") {
		t.Errorf("the connection off the allowlist was not refused promptly:\n%s", out)
	}
	if strings.Contains(out, "not allowed:") {
		t.Errorf("the connection off the allowlist reached the host:\n%s", out)
	}
	if dns.Queries() == 0 {
		t.Error("the test DNS server saw no query")
	}
}

func TestNetworkNoneHasNoRoute(t *testing.T) {
	echo := netstacktest.TCPEcho(t, "host:")
	out, errOut, code := runNet(t, nil, fmt.Sprintf(`
		ip route; ip -o link | cut -d: -f2
		echo x | nc 10.0.2.2 %d 2>&1; echo "nc=$?"
		cat /etc/resolv.conf 2>&1; true`, echo.Port()))
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if strings.Contains(out, "default") || strings.Contains(out, "eth0") || strings.Contains(out, "host:") {
		t.Errorf("--network none has a route or an interface beyond lo:\n%s", out)
	}
	if !strings.Contains(out, "unreachable") || !strings.Contains(out, "nc=1") {
		t.Errorf("nc to the gateway: want network unreachable:\n%s", out)
	}
	if strings.Contains(out, "nameserver") {
		t.Errorf("--network none wrote a resolv.conf:\n%s", out)
	}
}

// hostState is what a sandbox must not change on the host (hoststate),
// and the count of listening unix sockets bound to a path (not the
// connected ones of whatever else runs here).
func hostState(t *testing.T) hoststate.State {
	t.Helper()
	// Its own directories and caches change; nothing else may.
	state, err := hoststate.Snapshot(t.Logf, filepath.Dir(rungvBinary), sharedCache(t))
	if err != nil {
		t.Fatal(err)
	}
	// Other test packages run at once; their files and processes are not ours.
	state = state.WithoutBusy()
	data, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(data), "\n") {
		if fs := strings.Fields(l); len(fs) >= 8 && fs[5] == "01" && fs[3] == "00010000" {
			n++
		}
	}
	state["listening unix sockets"] = fmt.Sprint(n)
	return state
}

func TestNATChangesNothingOnTheHost(t *testing.T) {
	echo := netstacktest.TCPEcho(t, "host:")
	dns := netstacktest.NewDNSServer(t, nil)
	sock := filepath.Join(t.TempDir(), "p.sock")
	flags := []string{"--network", "nat", "--host-loopback", "--dns-upstream", dns.Addr.String(),
		"-p", "unix:" + sock + ":8080", "-p", fmt.Sprintf("127.0.0.1:%d:8080", netstacktest.FreePort(t))}
	script := fmt.Sprintf(`echo x | nc 10.0.2.2 %d; nslookup nothing.gvx.test >/dev/null 2>&1; ip link add dummy0 type dummy 2>/dev/null; ip route add 192.0.2.0/24 dev eth0 2>/dev/null; true`, echo.Port())
	workload := func() {
		out, errOut, code := runNet(t, flags, script)
		if code != 0 || !strings.Contains(out, "host:x") {
			t.Fatalf("sandbox: exit %d %q %q", code, out, errOut)
		}
		waitGone(t, sock)
	}
	if diffs := hoststate.Unchanged(3, func() hoststate.State { return hostState(t) }, workload, t.Logf); diffs != nil {
		t.Fatalf("a NAT sandbox changed the host:\n%s", strings.Join(diffs, "\n"))
	}
}

// TestNetRawAndPacketSocketWrite checks what busybox arping can do with a
// packet socket: not open one without --net-raw, open one but not send
// with it, send. (Whether it sees the answer is gVisor's packet socket
// business: the NAT answers, eth0's counters show the replies, yet
// arping reports none.)
func TestNetRawAndPacketSocketWrite(t *testing.T) {
	script := `arping -c 1 -w 1 -I eth0 10.0.2.2 2>&1; true`
	cases := []struct {
		flags []string
		want  string
	}{
		{nil, "socket: Operation not permitted"},                               // no CAP_NET_RAW
		{[]string{"--net-raw"}, "Sent 0 probe"},                                // capture only
		{[]string{"--net-raw", "--allow-packet-socket-write"}, "Sent 1 probe"}, // and send
	}
	for _, c := range cases {
		flags := append([]string{"--network", "nat", "--dns-upstream", "127.0.0.1:9"}, c.flags...)
		out, errOut, code := runNet(t, flags, script)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, output %q %q; want %q", c.flags, code, out, errOut, c.want)
		}
	}
}
