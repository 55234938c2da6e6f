package netstack

import (
	"io"
	"net"
	"path/filepath"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"

	"z.gfire.dev/gvx/core/netstack/netstacktest"
)

// These measure the relays with a plain stack as the guest; benchmarks/
// measures real sandboxes.

const benchChunk = 1 << 20

// BenchmarkNATUpload sends from the guest through the NAT to a host sink.
func BenchmarkNATUpload(b *testing.B) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go discardAll(l)
	_, g := attach(b, Config{Mode: ModeNAT, HostLoopback: true})
	c, err := dialGuest(b, g, gateway(l.Addr().(*net.TCPAddr).AddrPort().Port()))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	writeChunks(b, c)
}

// BenchmarkPublishUnixUpload sends from the host through a unix socket to
// a guest sink.
func BenchmarkPublishUnixUpload(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "s")
	_, g := attach(b, Config{Publish: []Publish{{HostPath: sock, GuestPort: 7000}}})
	l, err := gonet.ListenTCP(g, tcpip.FullAddress{Addr: guestLoopback, Port: 7000}, ipv4.ProtocolNumber)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go discardAll(l)
	c, err := net.Dial("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	writeChunks(b, c)
}

// discardAll accepts connections on l and reads each to EOF until l is
// closed.
func discardAll(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { io.Copy(io.Discard, c); c.Close() }()
	}
}

// writeChunks writes b.N chunks of benchChunk bytes to c, timed.
func writeChunks(b *testing.B, c net.Conn) {
	buf := make([]byte, benchChunk)
	b.SetBytes(benchChunk)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNATConnect measures a guest connection through the NAT to a
// host echo server with a 1-byte round trip.
func BenchmarkNATConnect(b *testing.B) {
	echo := netstacktest.TCPEcho(b, "")
	_, g := attach(b, Config{Mode: ModeNAT, HostLoopback: true})
	buf := []byte{1}
	b.ResetTimer()
	for range b.N {
		c, err := dialGuest(b, g, gateway(echo.Port()))
		if err != nil {
			b.Fatal(err)
		}
		c.Write(buf)
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
