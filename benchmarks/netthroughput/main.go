// Command netthroughput measures gvx's network paths on this machine:
// bulk transfers through a published unix socket (-p unix:), a published
// TCP port and the NAT, both ways, and connection setup latency, next to
// the host's own loopback as the anchor.
//
//	go run ./benchmarks/netthroughput -rungv build/rungv -image oci:DIR:latest [-mb 100] [-n 3]
//
// The image needs busybox's sh (gvx's default and test images have it);
// a static helper (core/netstack/internal/nettool) is built and copied
// into the sandbox for the guest's side. All traffic stays on 127.0.0.1
// and in the sandbox.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"z.gfire.dev/gvx/benchmarks/internal/benchfmt"
	"z.gfire.dev/gvx/core/gvx"
	"z.gfire.dev/gvx/core/spec"
)

var (
	rungv = flag.String("rungv", "build/rungv", "rungv binary")
	image = flag.String("image", "", "gvx image reference (cached or pullable), e.g. from `go run ./core/internal/testimage/mkimage -default DIR`")
	cache = flag.String("cache", "", "gvx image cache (default $GVX_CACHE)")
	mb    = flag.Int("mb", 100, "megabytes per transfer")
	n     = flag.Int("n", 3, "transfers per figure (the median is reported)")
	conns = flag.Int("conns", 200, "connections for the setup latency")
)

// Guest ports of the helper's servers.
const (
	sinkPort  = 9000
	servePort = 9001
	echoPort  = 9002
)

func main() {
	flag.Parse()
	if *image == "" {
		fail(errors.New("-image is required"))
	}
	if abs, err := filepath.Abs(*rungv); err == nil {
		*rungv = abs
	}
	bytes := *mb * 1000 * 1000
	dir, err := os.MkdirTemp("", "gvx-netbench-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	tool, err := buildNettool(dir)
	if err != nil {
		fail(err)
	}

	host, err := startHostServers(bytes)
	if err != nil {
		fail(err)
	}
	defer host.close()

	upSock := filepath.Join(dir, "up.sock")
	downSock := filepath.Join(dir, "down.sock")
	echoSock := filepath.Join(dir, "echo.sock")
	tcpPort, err := freePort()
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	sb, err := gvx.New(ctx, gvx.Config{
		Sandbox: spec.Sandbox{
			Image: *image, KeepAlive: true,
			Network: spec.NetworkNAT, HostLoopback: true,
			Ports: []spec.Port{
				{HostPath: upSock, GuestPort: sinkPort},
				{HostPath: downSock, GuestPort: servePort},
				{HostPath: echoSock, GuestPort: echoPort},
				{HostPort: tcpPort, GuestPort: sinkPort},
			},
		},
		Rungv: *rungv, Cache: *cache,
		Stderr: os.Stderr,
	})
	if err != nil {
		fail(err)
	}
	defer sb.Close()
	if _, err := sb.WriteFile(ctx, "/nettool", strings.NewReader(string(tool)), gvx.WriteOptions{Mode: 0o755}); err != nil {
		fail(err)
	}
	guestCtx, stopGuest := context.WithCancel(ctx)
	defer stopGuest()
	for _, argv := range [][]string{
		{"/nettool", "sink", strconv.Itoa(sinkPort)},
		{"/nettool", "serve", strconv.Itoa(servePort), strconv.Itoa(bytes)},
		{"/nettool", "echo", strconv.Itoa(echoPort)},
	} {
		up := newLineWaiter("listening")
		go sb.Exec(guestCtx, argv, &gvx.ExecOptions{Stdout: up})
		select {
		case <-up.seen:
		case <-time.After(10 * time.Second):
			fail(fmt.Errorf("%v did not start listening in the guest", argv))
		}
	}

	fmt.Printf("%d MB per transfer, median of %d; %d CPUs; load average %s\n\n", *mb, *n, numCPU(), benchfmt.LoadAvg())
	fmt.Println("| path | MB/s |")
	fmt.Println("|---|---|")
	rowOf("host loopback TCP (anchor)", func() (float64, error) { return upload("tcp", host.sink, bytes) })
	rowOf("host → guest through `-p unix:`", func() (float64, error) { return upload("unix", upSock, bytes) })
	rowOf("guest → host through `-p unix:`", func() (float64, error) { return download("unix", downSock) })
	rowOf("host → guest through `-p 127.0.0.1:PORT:`", func() (float64, error) {
		return upload("tcp", fmt.Sprintf("127.0.0.1:%d", tcpPort), bytes)
	})
	rowOf("guest → host through the NAT (`10.0.2.2` with --host-loopback)", func() (float64, error) {
		return guestRate(ctx, sb, "/nettool", "source", gateway(host.sink), strconv.Itoa(bytes))
	})
	rowOf("host → guest through the NAT", func() (float64, error) {
		return guestRate(ctx, sb, "/nettool", "fetch", gateway(host.source))
	})

	fmt.Println()
	fmt.Printf("Connection setup + 1-byte round trip, %d sequential connections:\n\n", *conns)
	fmt.Println("| path | median | p90 |")
	fmt.Println("|---|---|---|")
	p50, p90, err := hostConnect("tcp", host.echo, *conns)
	latencyRow("host loopback TCP (anchor)", p50, p90, err)
	p50, p90, err = guestConnect(ctx, sb, fmt.Sprintf("127.0.0.1:%d", echoPort), *conns)
	latencyRow("guest loopback TCP inside the sandbox (anchor)", p50, p90, err)
	p50, p90, err = hostConnect("unix", echoSock, *conns)
	latencyRow("host → guest through `-p unix:`", p50, p90, err)
	p50, p90, err = guestConnect(ctx, sb, gateway(host.echo), *conns)
	latencyRow("guest → host through the NAT", p50, p90, err)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "netthroughput:", err)
	os.Exit(1)
}

// buildNettool builds the guest helper with the Go toolchain.
func buildNettool(dir string) ([]byte, error) {
	out := filepath.Join(dir, "nettool")
	cmd := exec.Command("go", "build", "-o", out, "./core/netstack/internal/nettool")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building nettool (run from the repository root): %v\n%s", err, msg)
	}
	return os.ReadFile(out)
}

// hostServers are the NAT's far ends on 127.0.0.1.
type hostServers struct {
	sink, source, echo string
	ls                 []net.Listener
}

func startHostServers(bytes int) (*hostServers, error) {
	h := &hostServers{}
	for _, handle := range []func(net.Conn){
		func(c net.Conn) { drain(c) },
		func(c net.Conn) { sendN(c, bytes) },
		func(c net.Conn) { io.Copy(c, c) },
	} {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			h.close()
			return nil, err
		}
		h.ls = append(h.ls, l)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() { handle(c); c.Close() }()
			}
		}()
	}
	h.sink, h.source, h.echo = h.ls[0].Addr().String(), h.ls[1].Addr().String(), h.ls[2].Addr().String()
	return h, nil
}

func (h *hostServers) close() {
	for _, l := range h.ls {
		l.Close()
	}
}

// gateway names a host loopback address as the guest reaches it.
func gateway(hostAddr string) string {
	_, port, _ := net.SplitHostPort(hostAddr)
	return "10.0.2.2:" + port
}

func sendN(w io.Writer, n int) error {
	buf := make([]byte, 256<<10)
	for n > 0 {
		k, err := w.Write(buf[:min(len(buf), n)])
		n -= k
		if err != nil {
			return err
		}
	}
	return nil
}

// drain reads r to EOF with large reads. (io.Copy to io.Discard would
// read 8 KiB at a time, through io.Discard's ReadFrom: a system call each,
// which in a sandbox costs. With ReadFrom and r's WriteTo hidden,
// CopyBuffer reads into the buffer given.)
func drain(r io.Reader) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{io.Discard}, struct{ io.Reader }{r}, make([]byte, 256<<10))
}

// upload sends bytes to a sink and waits until it has read them all.
func upload(network, addr string, bytes int) (float64, error) {
	c, err := net.Dial(network, addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	if err := sendN(c, bytes); err != nil {
		return 0, err
	}
	c.(interface{ CloseWrite() error }).CloseWrite()
	drain(c) // EOF once the sink has read everything
	return float64(bytes) / time.Since(start).Seconds() / 1e6, nil
}

// download reads everything a server sends.
func download(network, addr string) (float64, error) {
	c, err := net.Dial(network, addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	got, err := drain(c)
	if err != nil {
		return 0, err
	}
	if got != int64(*mb*1000*1000) {
		return 0, fmt.Errorf("got %d bytes", got)
	}
	return float64(got) / time.Since(start).Seconds() / 1e6, nil
}

var rateRE = regexp.MustCompile(`([0-9.]+) MB/s`)

// guestRate runs the helper in the guest and returns the rate it reports.
func guestRate(ctx context.Context, sb *gvx.Sandbox, argv ...string) (float64, error) {
	res, err := sb.Exec(ctx, argv, nil)
	if err != nil {
		return 0, err
	}
	m := rateRE.FindSubmatch(res.Stdout)
	if res.ExitCode != 0 || m == nil {
		return 0, fmt.Errorf("%v: exit %d: %s%s", argv, res.ExitCode, res.Stdout, res.Stderr)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

func hostConnect(network, addr string, count int) (time.Duration, time.Duration, error) {
	var took []time.Duration
	b := []byte{1}
	for range count {
		start := time.Now()
		c, err := net.Dial(network, addr)
		if err != nil {
			return 0, 0, err
		}
		c.Write(b)
		if _, err := io.ReadFull(c, b); err != nil {
			c.Close()
			return 0, 0, err
		}
		took = append(took, time.Since(start))
		c.Close()
	}
	slices.Sort(took)
	return took[len(took)/2], took[len(took)*9/10], nil
}

var connectRE = regexp.MustCompile(`median (\d+)us p90 (\d+)us`)

func guestConnect(ctx context.Context, sb *gvx.Sandbox, addr string, count int) (time.Duration, time.Duration, error) {
	res, err := sb.Exec(ctx, []string{"/nettool", "connect", addr, strconv.Itoa(count)}, nil)
	if err != nil {
		return 0, 0, err
	}
	m := connectRE.FindSubmatch(res.Stdout)
	if m == nil {
		return 0, 0, fmt.Errorf("exit %d: %s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	p50, _ := strconv.Atoi(string(m[1]))
	p90, _ := strconv.Atoi(string(m[2]))
	return time.Duration(p50) * time.Microsecond, time.Duration(p90) * time.Microsecond, nil
}

// median runs f *n times and returns the median rate.
func median(f func() (float64, error)) (float64, error) {
	var rates []float64
	for range *n {
		r, err := f()
		if err != nil {
			return 0, err
		}
		rates = append(rates, r)
	}
	slices.Sort(rates)
	return rates[len(rates)/2], nil
}

// rowOf prints the median of f's rates.
func rowOf(what string, f func() (float64, error)) {
	rate, err := median(f)
	if err != nil {
		fmt.Printf("| %s | error: %v |\n", what, err)
		return
	}
	fmt.Printf("| %s | %.0f |\n", what, rate)
}

func latencyRow(what string, p50, p90 time.Duration, err error) {
	if err != nil {
		fmt.Printf("| %s | error: %v | |\n", what, err)
		return
	}
	fmt.Printf("| %s | %v | %v |\n", what, p50.Round(time.Microsecond), p90.Round(time.Microsecond))
}

// lineWaiter is a Writer that closes seen once the output contains want.
type lineWaiter struct {
	want string
	buf  []byte
	seen chan struct{}
	once sync.Once
}

func newLineWaiter(want string) *lineWaiter {
	return &lineWaiter{want: want, seen: make(chan struct{})}
}

func (w *lineWaiter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	if strings.Contains(string(w.buf), w.want) {
		w.once.Do(func() { close(w.seen) })
		w.buf = nil
	}
	return len(p), nil
}

func freePort() (uint16, error) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port), nil
}

func numCPU() int {
	data, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(data), "processor\t:")
}
