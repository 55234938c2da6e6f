package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/hoststate"
	"z.gfire.dev/gvx/core/internal/testimage"
	"z.gfire.dev/gvx/core/netstack"
	"z.gfire.dev/gvx/core/netstack/netstacktest"
)

// The network tests run real sandboxes, locked down as always, and talk
// only to servers on 127.0.0.1. Every NAT sandbox gets --dns-upstream
// pointing at a test server: no query reaches the host's resolvers.

var netImage struct {
	once  sync.Once
	cache string
	ref   string
	err   error
}

// netTestImage returns a cache with the test image pulled, shared by the
// network tests.
func netTestImage(t *testing.T) (cache, ref string) {
	t.Helper()
	netImage.once.Do(func() {
		b, err := testimage.Build()
		if err != nil {
			netImage.err = err
			return
		}
		netImage.cache = filepath.Join(filepath.Dir(rungvBinary), "net-cache")
		netImage.ref = b.LayoutRef()
		cmd := exec.Command(rungvBinary, "--cache", netImage.cache, "pull", "-q", netImage.ref)
		if out, err := cmd.CombinedOutput(); err != nil {
			netImage.err = fmt.Errorf("pull: %v\n%s", err, out)
		}
	})
	if netImage.err != nil {
		t.Fatal(netImage.err)
	}
	return netImage.cache, netImage.ref
}

// runNet runs a shell script in a sandbox with the given rungv flags.
func runNet(t *testing.T, flags []string, script string) (string, string, int) {
	t.Helper()
	cache, ref := netTestImage(t)
	args := append([]string{"run"}, flags...)
	args = append(args, ref, "sh", "-c", script)
	return rungv(t, cache, args...)
}

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

// startRungv starts a long-running sandbox and returns its command and
// a buffer with its stderr.
func startRungv(t *testing.T, flags []string, script string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cache, ref := netTestImage(t)
	args := append([]string{"--cache", cache, "run"}, flags...)
	args = append(args, ref, "sh", "-c", script)
	cmd := exec.Command(rungvBinary, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, &stderr
}

// httpGet fetches url with client, retrying until the guest's server is
// up or the deadline passes.
func httpGet(t *testing.T, client *http.Client, url string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == 200 {
				return string(body)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func unixClient(path string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
}

// waitGone waits until path no longer exists.
func waitGone(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Lstat(path); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const httpdScript = `mkdir -p /tmp/www && echo "guest httpd" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www`

func TestPublishedPortsFromTheHost(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "web.sock")
	port := netstacktest.FreePort(t)
	for _, network := range []string{"none", "nat"} {
		t.Run(network, func(t *testing.T) {
			flags := []string{"--network", network, "-p", "unix:" + sock + ":8080", "-p", fmt.Sprintf("127.0.0.1:%d:8080", port)}
			cmd, stderr := startRungv(t, flags, httpdScript)
			if got := httpGet(t, unixClient(sock), "http://guest/"); got != "guest httpd\n" {
				t.Errorf("through -p unix: %q", got)
			}
			if got := httpGet(t, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/", port)); got != "guest httpd\n" {
				t.Errorf("through -p 127.0.0.1:%d:8080: %q", port, got)
			}
			if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("the published socket: %v %v, want mode 0600", st.Mode(), err)
			}
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			waitGone(t, sock)
			if t.Failed() {
				t.Logf("rungv stderr:\n%s", stderr)
			}
		})
	}

	// -p GUESTPORT: the host picks the port, and rungv says which on
	// stderr before the sandbox starts.
	cache, ref := netTestImage(t)
	cmd := exec.Command(rungvBinary, "--cache", cache, "run", "-p", "8080", ref, "sh", "-c", httpdScript)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	announced := regexp.MustCompile(`^rungv: published 127\.0\.0\.1:(\d+) -> 8080/tcp$`)
	lines := bufio.NewScanner(stderr)
	chosen := ""
	for chosen == "" && lines.Scan() {
		if m := announced.FindStringSubmatch(lines.Text()); m != nil {
			chosen = m[1]
		}
	}
	if chosen == "" {
		t.Fatal("rungv -p 8080 did not say which host port it published")
	}
	go io.Copy(io.Discard, stderr)
	if got := httpGet(t, http.DefaultClient, "http://127.0.0.1:"+chosen+"/"); got != "guest httpd\n" {
		t.Errorf("through -p 8080 (host port %s): %q", chosen, got)
	}
}

func TestPublishedSocketRemovedAfterKill9(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "docker.sock")
	ctl := filepath.Join(dir, "control.sock")
	cmd, _ := startRungv(t, []string{"-p", "unix:" + sock + ":8080", "--control", "unix:" + ctl}, httpdScript)
	if got := httpGet(t, unixClient(sock), "http://guest/"); got != "guest httpd\n" {
		t.Fatalf("through -p unix: %q", got)
	}
	cmd.Process.Kill()
	cmd.Wait()
	waitGone(t, sock)
	waitGone(t, ctl)
}

func TestPublishedRawTCPHalfClose(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nc.sock")
	startRungv(t, []string{"-p", "unix:" + sock + ":9000"}, `exec nc -l -p 9000 -e cat`)
	payload := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err != nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // rungv is starting
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			io.WriteString(c, payload)
			c.(*net.UnixConn).CloseWrite()
		}()
		c.SetDeadline(time.Now().Add(15 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if len(got) == 0 && time.Now().Before(deadline) {
			// The guest's nc was not listening yet: the relay closed
			// the connection at once.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil || string(got) != payload {
			t.Fatalf("1 MiB echoed by the guest: %d bytes, %v", len(got), err)
		}
		return
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
