package gvx

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/netstack/netstacktest"
	"z.gfire.dev/gvx/core/spec"
)

// TestNetworkSpec: the network fields of a Config reach rungv's spec as
// they are, and a Config the spec refuses is refused naming the spec's
// field.
func TestNetworkSpec(t *testing.T) {
	cfg := Config{Sandbox: spec.Sandbox{Image: "img", Network: spec.NetworkNAT, HostLoopback: true,
		AllowNet: []string{"10.0.2.2:8080", "192.0.2.0/24"},
		Ports: []spec.Port{
			{HostPath: "/run/seed.sock", GuestPort: 2375},
			{HostPort: 8080, GuestPort: 80},
			{HostIP: "::1", HostPort: 5353, GuestPort: 53, Protocol: "udp"},
			{GuestPort: 8080},
		},
		NetRaw: true, NFTables: true, AllowPacketSocketWrite: true}}
	sp := rungvSpec(t, cfg)
	want := spec.Sandbox{Image: "img", Network: spec.NetworkNAT, HostLoopback: true, AllowNet: cfg.AllowNet,
		Ports: []spec.Port{{HostPath: "/run/seed.sock", GuestPort: 2375}, {HostPort: 8080, GuestPort: 80},
			{HostIP: "::1", HostPort: 5353, GuestPort: 53, Protocol: "udp"}, {GuestPort: 8080}},
		NetRaw: true, NFTables: true, AllowPacketSocketWrite: true}
	if !reflect.DeepEqual(sp, want) {
		t.Errorf("spec\n%+v\nwant\n%+v", sp, want)
	}
	for _, c := range []struct {
		sp   spec.Sandbox
		want string
	}{
		{spec.Sandbox{AllowNet: []string{"0.0.0.0/0"}}, `allow_net: restricts the NAT, which this sandbox does not have; set network to "nat"`},
		{spec.Sandbox{HostLoopback: true}, `host_loopback: opens the NAT's gateway`},
		{spec.Sandbox{Network: "bridge"}, `network: "bridge" is not a network mode; use "none" or "nat"`},
		{spec.Sandbox{AllowPacketSocketWrite: true}, "allow_packet_socket_write: needs net_raw"},
		{spec.Sandbox{Ports: []spec.Port{{HostPort: 1}}}, "ports[0].guest_port: is 0"},
		{spec.Sandbox{Ports: []spec.Port{{HostPath: "/x", GuestPort: 1, Protocol: "udp"}}}, "ports[0].host_path: a unix socket carries TCP"},
		{spec.Sandbox{Ports: []spec.Port{{HostPort: 1, GuestPort: 1, Protocol: "sctp"}}}, `ports[0].protocol: "sctp" is not a protocol; use tcp or udp`},
	} {
		c.sp.Image = "img"
		if _, err := New(context.Background(), Config{Sandbox: c.sp, Rungv: "/nonexistent/rungv"}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.sp, err, c.want)
		}
	}
}

var nettool struct {
	once sync.Once
	data []byte
	err  error
}

// nettoolBinary builds core/netstack/internal/nettool, a static UDP and
// TCP helper (busybox has no UDP client), to copy into sandboxes.
func nettoolBinary(t *testing.T) []byte {
	t.Helper()
	nettool.once.Do(func() {
		out := filepath.Join(filepath.Dir(rungvBin), "nettool")
		if _, err := os.Stat(out); err == nil {
			// A re-run (hostile harness, container) finds it beside rungv.
			nettool.data, nettool.err = os.ReadFile(out)
			return
		}
		cmd := exec.Command("go", "build", "-o", out, "../netstack/internal/nettool")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			nettool.err = fmt.Errorf("building nettool: %v\n%s", err, msg)
			return
		}
		nettool.data, nettool.err = os.ReadFile(out)
	})
	if nettool.err != nil {
		t.Fatal(nettool.err)
	}
	return nettool.data
}

// natConfig is a NAT sandbox whose DNS goes to a test server, never to
// the host's resolvers.
func natConfig(t *testing.T) Config {
	dns := netstacktest.NewDNSServer(t, nil)
	cfg := config()
	cfg.Network = spec.NetworkNAT
	cfg.extraArgs = []string{"--dns-upstream", dns.Addr.String()}
	return cfg
}

func TestNATUDPAndTCPThroughTheSDK(t *testing.T) {
	udpEcho := netstacktest.UDPEcho(t, "udp:")
	tcpEcho := netstacktest.TCPEcho(t, "tcp:")
	cfg := natConfig(t)
	cfg.HostLoopback = true
	cfg.AllowNet = []string{fmt.Sprintf("10.0.2.2:%d", udpEcho.Port()), fmt.Sprintf("10.0.2.2:%d", tcpEcho.Port())}
	sb := newSandbox(t, cfg)
	ctx := context.Background()
	if _, err := sb.WriteFile(ctx, "/tmp/nettool", bytes.NewReader(nettoolBinary(t)), WriteOptions{Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	res := sh(t, sb, fmt.Sprintf("/tmp/nettool udp 10.0.2.2:%d hello", udpEcho.Port()), nil)
	if res.ExitCode != 0 || string(res.Stdout) != "udp:hello\n" {
		t.Errorf("UDP through the NAT: %+v %s", res, res.Stderr)
	}
	res = sh(t, sb, fmt.Sprintf("echo hi | nc 10.0.2.2 %d", tcpEcho.Port()), nil)
	if res.ExitCode != 0 || string(res.Stdout) != "tcp:hi\n" {
		t.Errorf("TCP through the NAT: %+v %s", res, res.Stderr)
	}
	// Off the allowlist: ICMP port unreachable, at once.
	start := time.Now()
	res = sh(t, sb, fmt.Sprintf("/tmp/nettool udp 10.0.2.2:%d hello", udpEcho.Port()+1), nil)
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "connection refused") || time.Since(start) > 3*time.Second {
		t.Errorf("UDP off the allowlist: exit %d after %v: %s", res.ExitCode, time.Since(start), res.Stderr)
	}
}

func TestPublishedPortsThroughTheSDK(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "seed.sock")
	port := netstacktest.FreePort(t)
	cfg := config()
	cfg.Ports = []spec.Port{{HostPath: sock, GuestPort: 2375}, {HostPort: port, GuestPort: 2375}, {HostPort: port, GuestPort: 5353, Protocol: "udp"},
		{GuestPort: 2375}} // the host picks the last one's port
	sb := newSandbox(t, cfg)
	ports := sb.Info().Ports
	if len(ports) != 4 || ports[0].HostPath != sock || ports[1].HostPort != port || ports[2].Protocol != "udp" ||
		ports[3].HostIP != "127.0.0.1" || ports[3].HostPort == 0 || ports[3].HostPort == port || ports[3].GuestPort != 2375 {
		t.Fatalf("Info().Ports = %+v, want the four as bound, the last with the port the host chose", ports)
	}
	chosen := ports[3].HostPort
	if _, err := sb.WriteFile(context.Background(), "/tmp/nettool", bytes.NewReader(nettoolBinary(t)), WriteOptions{Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	go sb.Exec(context.Background(), []string{"/tmp/nettool", "echo", "2375"}, nil)
	go sb.Exec(context.Background(), []string{"/tmp/nettool", "udpecho", "5353"}, nil)
	for _, dial := range []func() (net.Conn, error){
		func() (net.Conn, error) { return net.Dial("unix", sock) },
		func() (net.Conn, error) { return net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)) },
		func() (net.Conn, error) { return net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", chosen)) },
	} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := dial()
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, "seed")
			c.(interface{ CloseWrite() error }).CloseWrite()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			got, _ := io.ReadAll(c)
			c.Close()
			if string(got) == "seed" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("echo through a published port: %q", got)
			}
			time.Sleep(20 * time.Millisecond) // the guest server is starting
		}
	}
	// UDP: the same host port number, another protocol.
	u, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	buf := make([]byte, 100)
	got := ""
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && got != "guest:dgram"; {
		u.Write([]byte("dgram"))
		u.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if k, err := u.Read(buf); err == nil {
			got = string(buf[:k])
		}
	}
	if got != "guest:dgram" {
		t.Errorf("UDP through a published port: %q", got)
	}

	sb.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Lstat(sock); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the published unix socket outlived the sandbox")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
