package control

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"z.gfire.dev/gvx/core/spec"
)

// These tests cover the protocol itself against a small in-memory backend
// with a few built-in commands. The real sandbox backend is tested through
// rungv in core/cmd/rungv and the SDK.

type testBackend struct {
	mu     sync.Mutex
	files  map[string][]byte
	killed []int
	// jobSignals are the signals sent to execs' descendants.
	jobSignals []int
	// gate holds the start of a "gated-sleep" until it is closed.
	gate    chan struct{}
	nextPID int
	initSig chan int
	started []*testProcess
	stopped bool // the last checkpoint asked to stop
}

func newTestBackend() *testBackend {
	return &testBackend{files: map[string][]byte{}, nextPID: 100, initSig: make(chan int, 1)}
}

func (b *testBackend) Info() SandboxInfo { return SandboxInfo{ID: "test", PID: 4242, Hostname: "box"} }

type testProcess struct {
	pid  int
	b    *testBackend
	sig  chan int
	done chan struct{}
	code int
	sigd int
}

func (p *testProcess) PID() int { return p.pid }
func (p *testProcess) Signal(sig int) error {
	select {
	case p.sig <- sig:
	default:
	}
	return nil
}
func (p *testProcess) SignalDescendants(sig int) error {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	p.b.jobSignals = append(p.b.jobSignals, sig)
	return nil
}
func (p *testProcess) Wait() (int, int, error) { <-p.done; return p.code, p.sigd, nil }

// Exec knows: echo ARGS (stdout), err ARGS (stderr), cat (stdin to
// stdout), exit N, sleep (until signalled), spew N (N bytes of 'x'), drip
// N (N bytes of 'x', a write each), and sleep-after-hangup (a sleep whose
// start outlasts its client).
func (b *testBackend) Exec(ctx context.Context, req ExecRequest, stdio Stdio) (Process, error) {
	if req.Argv[0] == "gated-sleep" {
		<-b.gate
		req.Argv[0] = "sleep"
	}
	b.mu.Lock()
	b.nextPID++
	p := &testProcess{pid: b.nextPID, b: b, sig: make(chan int, 1), done: make(chan struct{})}
	b.started = append(b.started, p)
	b.mu.Unlock()
	args := req.Argv[1:]
	if req.Argv[0] == "sleep-after-hangup" {
		// Starts once the client is gone and the server has looked for
		// its commands to kill.
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond)
		req.Argv[0] = "sleep"
	}
	switch req.Argv[0] {
	case "echo", "err", "cat", "exit", "sleep", "spew", "drip", "env":
	default:
		return nil, Errorf(CodeNotFound, "%s: command not found", req.Argv[0])
	}
	go func() {
		defer close(p.done)
		switch req.Argv[0] {
		case "echo":
			fmt.Fprintln(stdio.Stdout, strings.Join(args, " "))
		case "err":
			fmt.Fprintln(stdio.Stderr, strings.Join(args, " "))
		case "env":
			fmt.Fprintln(stdio.Stdout, strings.Join(req.Env, ",")+"|"+req.Cwd+"|"+req.User)
		case "cat":
			if stdio.Stdin != nil {
				io.Copy(stdio.Stdout, stdio.Stdin)
			}
		case "exit":
			p.code, _ = strconv.Atoi(args[0])
		case "spew":
			n, _ := strconv.Atoi(args[0])
			stdio.Stdout.Write(bytes.Repeat([]byte("x"), n))
		case "drip":
			n, _ := strconv.Atoi(args[0])
			for range n {
				stdio.Stdout.Write([]byte("x"))
			}
		case "sleep":
			p.sigd = <-p.sig
			p.code = 128 + p.sigd
			b.mu.Lock()
			b.killed = append(b.killed, p.pid)
			b.mu.Unlock()
		}
	}()
	return p, nil
}

func (b *testBackend) SignalInit(sig int) error { b.initSig <- sig; return nil }

func (b *testBackend) ReadFile(ctx context.Context, path string, w io.Writer) (FileInfo, error) {
	b.mu.Lock()
	data, ok := b.files[path]
	b.mu.Unlock()
	if !ok {
		return FileInfo{}, fmt.Errorf("open %s: %w", path, fs.ErrNotExist)
	}
	w.Write(data)
	return FileInfo{Path: path, Size: int64(len(data)), Mode: syscall.S_IFREG | 0o644}, nil
}

func (b *testBackend) WriteFile(ctx context.Context, req WriteFileRequest, r io.Reader) (FileInfo, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return FileInfo{}, err
	}
	b.mu.Lock()
	b.files[req.Path] = data
	b.mu.Unlock()
	return FileInfo{Path: req.Path, Size: int64(len(data)), Mode: syscall.S_IFREG | req.Mode}, nil
}

// CopyIn keeps the stream as the "file" tar:DIR; CopyOut sends it back.
func (b *testBackend) CopyIn(ctx context.Context, req CopyInRequest, r io.Reader) (CopyResult, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return CopyResult{}, err
	}
	b.mu.Lock()
	b.files["tar:"+req.Path] = data
	b.mu.Unlock()
	return CopyResult{Entries: 1, Bytes: int64(len(data))}, nil
}

func (b *testBackend) CopyOut(ctx context.Context, path string, w io.Writer) (CopyResult, error) {
	b.mu.Lock()
	data, ok := b.files["tar:"+path]
	b.mu.Unlock()
	if !ok {
		return CopyResult{}, Errorf(CodeNotFound, "copy out %s: no such file", path)
	}
	n, err := w.Write(data)
	return CopyResult{Entries: 1, Bytes: int64(n)}, err
}

// Checkpoint sends the "file" snapshot; Stop records the request.
func (b *testBackend) Checkpoint(ctx context.Context, req CheckpointRequest, w io.Writer) (CheckpointResult, error) {
	b.mu.Lock()
	data, ok := b.files["snapshot"]
	b.stopped = req.Stop
	b.mu.Unlock()
	if !ok {
		return CheckpointResult{}, Errorf(CodeInvalid, "checkpoint: nothing to save")
	}
	n, err := w.Write(data)
	return CheckpointResult{Bytes: int64(n)}, err
}

func (b *testBackend) Stat(ctx context.Context, path string) (FileInfo, error) {
	b.mu.Lock()
	data, ok := b.files[path]
	b.mu.Unlock()
	if !ok {
		return FileInfo{}, fs.ErrNotExist
	}
	return FileInfo{Path: path, Size: int64(len(data))}, nil
}

func (b *testBackend) Wait(ctx context.Context) (WaitResult, error) {
	select {
	case sig := <-b.initSig:
		return WaitResult{ExitCode: 128 + sig, Signal: sig}, nil
	case <-ctx.Done():
		return WaitResult{}, ctx.Err()
	}
}

func (b *testBackend) Shutdown(ctx context.Context, grace time.Duration) error { return nil }

func (b *testBackend) Stats(ctx context.Context) (Stats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{MemoryUsage: uint64(len(b.files)), Tasks: b.nextPID - 100}, nil
}

var _ Backend = (*testBackend)(nil)

// serve starts a server for b on a unix socket and returns a connected
// client.
func serve(t *testing.T, b Backend) (*Client, string) {
	t.Helper()
	return serveWith(t, NewServer(b))
}

func serveWith(t *testing.T, srv *Server) (*Client, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "control.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		srv.Serve(ctx, l)
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done })
	c, err := Dial(context.Background(), "unix:"+sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, sock
}

func run(t *testing.T, c *Client, req ExecRequest, stdin io.Reader) (ExecResult, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := c.Exec(context.Background(), req, ExecIO{Stdin: stdin, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("exec %v: %v", req.Argv, err)
	}
	return res, out.String(), errb.String()
}

func TestExecBasics(t *testing.T) {
	b := newTestBackend()
	c, _ := serve(t, b)
	if c.Info().Hostname != "box" || c.Info().PID != 4242 {
		t.Errorf("Info() = %+v", c.Info())
	}
	res, out, errOut := run(t, c, ExecRequest{Exec: spec.Exec{Argv: []string{"echo", "hello", "world"}}}, nil)
	if out != "hello world\n" || errOut != "" || res.ExitCode != 0 || res.PID == 0 {
		t.Errorf("echo: %+v %q %q", res, out, errOut)
	}
	_, out, errOut = run(t, c, ExecRequest{Exec: spec.Exec{Argv: []string{"err", "oops"}}}, nil)
	if out != "" || errOut != "oops\n" {
		t.Errorf("stderr: %q %q", out, errOut)
	}
	if res, _, _ = run(t, c, ExecRequest{Exec: spec.Exec{Argv: []string{"exit", "3"}}}, nil); res.ExitCode != 3 {
		t.Errorf("exit 3: %+v", res)
	}
	_, out, _ = run(t, c, ExecRequest{Exec: spec.Exec{Argv: []string{"env"}, Env: []string{"A=1", "B=2"}, Cwd: "/work", User: "1000:1000"}}, nil)
	if out != "A=1,B=2|/work|1000:1000\n" {
		t.Errorf("env/cwd/user not passed: %q", out)
	}
	_, err := c.Exec(context.Background(), ExecRequest{Exec: spec.Exec{Argv: []string{"nope"}}}, ExecIO{})
	if !IsCode(err, CodeNotFound) || !strings.Contains(err.Error(), "command not found") {
		t.Errorf("unknown command: %v", err)
	}
	_, err = c.Exec(context.Background(), ExecRequest{}, ExecIO{})
	if !IsCode(err, CodeInvalid) || !strings.Contains(err.Error(), "argv: is empty") {
		t.Errorf("empty argv: %v", err)
	}
}

func TestExecStreamsLargeData(t *testing.T) {
	c, _ := serve(t, newTestBackend())
	in := make([]byte, 10<<20)
	rand.Read(in)
	_, out, _ := run(t, c, ExecRequest{Exec: spec.Exec{Argv: []string{"cat"}}}, bytes.NewReader(in))
	if out != string(in) {
		t.Fatalf("10 MiB through stdin and stdout came back as %d bytes, different", len(out))
	}
	_, out, _ = run(t, c, ExecRequest{Exec: spec.Exec{Argv: []string{"spew", "5000000"}}}, nil)
	if len(out) != 5000000 {
		t.Fatalf("spew: %d bytes", len(out))
	}
	// Written on the connection's reader goroutine.
	var buf bytes.Buffer
	if _, err := c.Exec(context.Background(), ExecRequest{Exec: spec.Exec{Argv: []string{"cat"}}, Stdin: true}, ExecIO{Stdin: bytes.NewReader(in), Stdout: &buf, InMemory: true}); err != nil || !bytes.Equal(buf.Bytes(), in) {
		t.Fatalf("10 MiB through stdin and an in-memory stdout came back as %d bytes, different (%v)", buf.Len(), err)
	}
}

func TestConcurrentExecs(t *testing.T) {
	c, _ := serve(t, newTestBackend())
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			payload := strings.Repeat(strconv.Itoa(i), 1000)
			_, err := c.Exec(context.Background(), ExecRequest{Exec: spec.Exec{Argv: []string{"cat"}}}, ExecIO{Stdin: strings.NewReader(payload), Stdout: &out})
			if err == nil && out.String() != payload {
				err = fmt.Errorf("exec %d: output mixed up (%d bytes)", i, out.Len())
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestExecTimeoutAndCancel(t *testing.T) {
	b := newTestBackend()
	c, _ := serve(t, b)
	res, _, _ := run(t, c, ExecRequest{Exec: spec.Exec{Argv: []string{"sleep"}, Timeout: spec.Seconds(50 * time.Millisecond)}}, nil)
	if !res.TimedOut || res.ExitCode != 137 || res.Signal != 9 {
		t.Errorf("timeout: %+v", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Exec(ctx, ExecRequest{Exec: spec.Exec{Argv: []string{"sleep"}}}, ExecIO{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled exec: %v", err)
	}
	// The cancelled command was killed, and the connection still works.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		n := len(b.killed)
		b.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cancelled exec not killed (killed: %d)", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, out, _ := run(t, c, ExecRequest{Exec: spec.Exec{Argv: []string{"echo", "ok"}}}, nil); out != "ok\n" {
		t.Errorf("after cancel: %q", out)
	}
}

// heldWriter is an exec's stdout that takes nothing until released, as a
// Python callback waiting for the GIL does.
type heldWriter struct {
	started chan struct{} // closed at the first Write
	release chan struct{}
	once    sync.Once
	writes  atomic.Int32
	n       atomic.Int64 // bytes taken
}

func newHeldWriter() *heldWriter {
	return &heldWriter{started: make(chan struct{}), release: make(chan struct{})}
}

// Write implements io.Writer.
func (w *heldWriter) Write(p []byte) (int, error) {
	w.writes.Add(1)
	w.once.Do(func() { close(w.started) })
	<-w.release
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// backlog is the cost in the window (see FrameCredit) of what the client
// holds of exec id's output.
func backlog(c *Client, id uint64) int {
	c.mu.Lock()
	call := c.calls[id]
	c.mu.Unlock()
	if call == nil || call.out == nil {
		return -1
	}
	call.out.mu.Lock()
	defer call.out.mu.Unlock()
	return call.out.backlog
}

// delivering counts the goroutines that pass an exec's output on.
func delivering() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("control.(*outbox).deliver("))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestAHeldWriterHoldsBackOnlyItsCommand: while an exec's writer takes
// nothing, the server sends one window of its output and then holds the
// command's writes, so that what the client holds stays within the window,
// whether the command writes large blocks or a byte at a time; the
// connection's other requests go on; once released, the writer gets all
// of the output.
func TestAHeldWriterHoldsBackOnlyItsCommand(t *testing.T) {
	for _, cmd := range []struct {
		name string
		size int
	}{
		{"spew", 4 * execOutputWindow},
		{"drip", 2 * execOutputWindow / (FrameCredit + 1)},
	} {
		t.Run(cmd.name, func(t *testing.T) {
			b := newTestBackend()
			c, _ := serve(t, b)
			held := newHeldWriter()
			done := make(chan error, 1)
			go func() {
				_, err := c.Exec(context.Background(), ExecRequest{Exec: spec.Exec{Argv: []string{cmd.name, strconv.Itoa(cmd.size)}}}, ExecIO{Stdout: held})
				done <- err
			}()
			<-held.started
			// The window is full once it has no room for a frame of a byte.
			waitFor(t, "a window of output queued", func() bool { return backlog(c, 1)+FrameCredit+1 > execOutputWindow })
			if _, out, _ := run(t, c, ExecRequest{Exec: spec.Exec{Argv: []string{"echo", "beside"}}}, nil); out != "beside\n" {
				t.Errorf("exec beside a held writer: %q", out)
			}
			if _, err := c.Stats(context.Background()); err != nil {
				t.Errorf("stats beside a held writer: %v", err)
			}
			b.mu.Lock()
			p := b.started[0]
			b.mu.Unlock()
			select {
			case <-p.done:
				t.Error("the command ended although its output was not taken")
			default:
			}
			if n := backlog(c, 1); n > execOutputWindow {
				t.Errorf("the client holds %d of the held exec's output, beyond the window of %d", n, execOutputWindow)
			}
			close(held.release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if n := held.n.Load(); n != int64(cmd.size) {
				t.Errorf("the released writer got %d bytes of %d", n, cmd.size)
			}
		})
	}
}

// TestAnExecLeftWithAHeldWriterLeaksNothing: an exec whose caller stops
// waiting (its context ends, or the client closes) while its writer is
// held returns at once; the server's command is no longer held back, and
// once the writer returns, no goroutine is left and nothing more is
// written.
func TestAnExecLeftWithAHeldWriterLeaksNothing(t *testing.T) {
	for _, end := range []string{"cancel", "close"} {
		t.Run(end, func(t *testing.T) {
			b := newTestBackend()
			c, _ := serve(t, b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			held := newHeldWriter()
			done := make(chan error, 1)
			go func() {
				_, err := c.Exec(ctx, ExecRequest{Exec: spec.Exec{Argv: []string{"spew", strconv.Itoa(4 * execOutputWindow)}}}, ExecIO{Stdout: held})
				done <- err
			}()
			<-held.started
			if end == "cancel" {
				cancel()
			} else {
				c.Close()
			}
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) && !IsCode(err, CodeUnavailable) {
					t.Errorf("exec left by %s: %v", end, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("exec left by %s did not return while its writer was held", end)
			}
			b.mu.Lock()
			spew := b.started[0]
			b.mu.Unlock()
			waitFor(t, "the command's writes let go", func() bool {
				select {
				case <-spew.done:
					return true
				default:
					return false
				}
			})
			close(held.release)
			waitFor(t, "the exec's delivery goroutine ended", func() bool { return delivering() == 0 })
			if n := held.writes.Load(); n != 1 {
				t.Errorf("%d writes, want only the one under way as the exec was left", n)
			}
		})
	}
}

// TestAServerWithoutFlowControl: against a server from before flow
// control, which does not accept the hello's window, the client sends no
// credit frames (that server would take them for the exec's stdin), holds
// at most a window of a held writer's output, and passes it all on in
// order once released.
func TestAServerWithoutFlowControl(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "old.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	output := make([]byte, 3*execOutputWindow)
	rand.Read(output)
	served := make(chan error, 1)
	go func() {
		served <- func() error {
			conn, err := l.Accept()
			if err != nil {
				return err
			}
			defer conn.Close()
			fr, fw := newFrameReader(conn), &frameWriter{w: conn}
			if _, err := fr.next(); err != nil {
				return fmt.Errorf("reading hello: %w", err)
			}
			fw.writeJSON(Welcome{Protocol: ProtocolName, Version: Version})
			if _, err := fr.next(); err != nil {
				return fmt.Errorf("reading the exec: %w", err)
			}
			// Sent from another goroutine, as a server's exec does, while
			// this one keeps reading.
			go func() {
				fw.writeData(1, StreamStdout, FlagEOF, output)
				fw.writeJSON(message{ID: 1, Result: []byte(`{"exit_code":0}`)})
			}()
			for {
				p, err := fr.next()
				if err != nil {
					return nil // the client closed
				}
				if p[0] == kindData {
					return fmt.Errorf("the client sent a data frame to a server without flow control: %q", p[:min(len(p), 16)])
				}
			}
		}()
	}()
	c, err := Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	held := newHeldWriter()
	var got bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), ExecRequest{Exec: spec.Exec{Argv: []string{"spew"}}}, ExecIO{Stdout: writerFunc(func(p []byte) (int, error) {
			held.Write(p)
			return got.Write(p)
		})})
		done <- err
	}()
	<-held.started
	waitFor(t, "a window of output queued", func() bool { return backlog(c, 1)+MaxData+FrameCredit > execOutputWindow })
	if n := backlog(c, 1); n > execOutputWindow {
		t.Errorf("the client holds %d bytes of a held exec's output, beyond the window of %d", n, execOutputWindow)
	}
	close(held.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), output) {
		t.Errorf("the writer got %d bytes, not the %d sent in order", got.Len(), len(output))
	}
	c.Close()
	if err := <-served; err != nil {
		t.Error(err)
	}
}

// writerFunc is an io.Writer made of a function.
type writerFunc func([]byte) (int, error)

// Write implements io.Writer.
func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestExecStartingAfterItsClientLeftIsKilled: a command whose start ends
// after its client went away, and after the server killed that client's
// commands, is killed too, rather than left running with nobody to answer
// (the server's connection then waited for it forever).
func TestExecStartingAfterItsClientLeftIsKilled(t *testing.T) {
	b := newTestBackend()
	c, _ := serve(t, b)
	go c.Exec(context.Background(), ExecRequest{Exec: spec.Exec{Argv: []string{"sleep-after-hangup"}}}, ExecIO{})
	time.Sleep(50 * time.Millisecond)
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		n := len(b.killed)
		b.mu.Unlock()
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			// Unblock the server's connection, or the test's cleanup
			// would wait for it forever.
			b.mu.Lock()
			for _, p := range b.started {
				p.Signal(int(syscall.SIGKILL))
			}
			b.mu.Unlock()
			t.Fatal("a command that started after its client left still runs")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestClientCloseKillsItsExecs(t *testing.T) {
	b := newTestBackend()
	c, sock := serve(t, b)
	go c.Exec(context.Background(), ExecRequest{Exec: spec.Exec{Argv: []string{"sleep"}}}, ExecIO{})
	time.Sleep(50 * time.Millisecond)
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		n := len(b.killed)
		b.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the exec of a closed connection still runs")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := c.Stat(context.Background(), "/x"); !IsCode(err, CodeUnavailable) {
		t.Errorf("call on a closed client: %v", err)
	}
	// Other clients are unaffected.
	c2, err := Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, out, _ := run(t, c2, ExecRequest{Exec: spec.Exec{Argv: []string{"echo", "still"}}}, nil); out != "still\n" {
		t.Errorf("second client: %q", out)
	}
}

// TestGoneClientIsNotLogged checks that answers which cannot be delivered
// because the client went away, as a pool closing its sandboxes does, make
// no noise on the server's log.
func TestGoneClientIsNotLogged(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "control.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logged []string
	srv := NewServer(newTestBackend())
	srv.Logf = func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		srv.Serve(ctx, l)
		close(done)
	}()
	for range 20 {
		c, err := Dial(context.Background(), "unix:"+sock)
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{})
		go func() {
			close(started)
			c.Exec(context.Background(), ExecRequest{Exec: spec.Exec{Argv: []string{"sleep"}}}, ExecIO{})
		}()
		<-started
		time.Sleep(5 * time.Millisecond)
		c.Close()
	}
	time.Sleep(100 * time.Millisecond) // the killed execs answer
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(logged) > 0 {
		t.Errorf("the server logged %d lines for clients that went away, first: %s", len(logged), logged[0])
	}
}

// TestTrackSeesEveryRequest checks that Server.Track brackets each request
// from its start to its answer, long execs included.
func TestTrackSeesEveryRequest(t *testing.T) {
	var mu sync.Mutex
	begun, ended := 0, 0
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return begun, ended
	}
	srv := NewServer(newTestBackend())
	srv.Track = func() func() {
		mu.Lock()
		defer mu.Unlock()
		begun++
		return func() {
			mu.Lock()
			defer mu.Unlock()
			ended++
		}
	}
	c, _ := serveWith(t, srv)
	if _, err := c.Stat(context.Background(), "/"); err != nil && !IsCode(err, CodeNotFound) {
		t.Fatal(err)
	}
	if b, e := counts(); b != 1 || e != 1 {
		t.Fatalf("after a Stat: %d begun, %d ended; want 1, 1", b, e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	execDone := make(chan struct{})
	go func() {
		defer close(execDone)
		c.Exec(ctx, ExecRequest{Exec: spec.Exec{Argv: []string{"sleep"}}}, ExecIO{})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for b, _ := counts(); b < 2; b, _ = counts() {
		if time.Now().After(deadline) {
			t.Fatal("the exec never began")
		}
		time.Sleep(time.Millisecond)
	}
	if _, e := counts(); e != 1 {
		t.Fatalf("a running exec counted as ended")
	}
	cancel()
	<-execDone
	for _, e := counts(); e < 2; _, e = counts() {
		if time.Now().After(deadline) {
			t.Fatal("the cancelled exec never counted as ended")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestFiles(t *testing.T) {
	c, _ := serve(t, newTestBackend())
	ctx := context.Background()
	content := make([]byte, 3<<20)
	rand.Read(content)
	info, err := c.WriteFile(ctx, WriteFileRequest{Path: "/a/b", Mode: 0o600}, bytes.NewReader(content))
	if err != nil || info.Size != int64(len(content)) || info.Mode&0o777 != 0o600 {
		t.Fatalf("write: %+v %v", info, err)
	}
	var got bytes.Buffer
	if info, err = c.ReadFile(ctx, "/a/b", &got); err != nil || !bytes.Equal(got.Bytes(), content) {
		t.Fatalf("read back: %v, %d bytes", err, got.Len())
	}
	if _, err := c.ReadFile(ctx, "/missing", io.Discard); !IsCode(err, CodeNotFound) {
		t.Errorf("missing file: %v", err)
	}
	if info, err := c.Stat(ctx, "/a/b"); err != nil || info.Size != int64(len(content)) {
		t.Errorf("stat: %+v %v", info, err)
	}
	if st, err := c.Stats(ctx); err != nil || st.MemoryUsage != 1 {
		t.Errorf("stats: %+v %v", st, err)
	}
}

// TestCopyStreams carries a tar stream of several frames each way; the
// archive's content is the backend's business (core/sentry tests it).
func TestCopyStreams(t *testing.T) {
	c, _ := serve(t, newTestBackend())
	ctx := context.Background()
	stream := make([]byte, 3*MaxData+17)
	rand.Read(stream)
	res, err := c.CopyIn(ctx, CopyInRequest{Path: "/work"}, bytes.NewReader(stream))
	if err != nil || res.Bytes != int64(len(stream)) {
		t.Fatalf("copy in: %+v %v", res, err)
	}
	var got bytes.Buffer
	if res, err = c.CopyOut(ctx, "/work", &got); err != nil || !bytes.Equal(got.Bytes(), stream) || res.Bytes != int64(len(stream)) {
		t.Fatalf("copy out: %+v %v, %d bytes back of %d", res, err, got.Len(), len(stream))
	}
	if _, err := c.CopyOut(ctx, "/missing", io.Discard); !IsCode(err, CodeNotFound) {
		t.Errorf("copy out of a missing path: %v", err)
	}

	// A destination that fails fails the request: the stream is its result.
	if _, err := c.CopyOut(ctx, "/work", failingWriter{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("copy out into a failing writer: %v", err)
	}

	// A source that fails midway fails the request with its own error;
	// the backend saw an aborted stream, not a clean end.
	broken := io.MultiReader(bytes.NewReader(stream[:MaxData+5]), iotest.ErrReader(errors.New("disk on fire")))
	var se *SourceError
	if _, err := c.CopyIn(ctx, CopyInRequest{Path: "/broken"}, broken); !errors.As(err, &se) || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("copy in from a failing source: %v; want a SourceError", err)
	}
	if _, err := c.WriteFile(ctx, WriteFileRequest{Path: "/broken-file"}, iotest.ErrReader(errors.New("disk on fire"))); !errors.As(err, &se) || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("write file from a failing source: %v; want a SourceError", err)
	}
}

func TestInitSignalAndWait(t *testing.T) {
	c, _ := serve(t, newTestBackend())
	ctx := context.Background()
	done := make(chan WaitResult)
	go func() {
		res, _ := c.Wait(ctx)
		done <- res
	}()
	if err := c.Signal(ctx, 15); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.ExitCode != 143 || res.Signal != 15 {
		t.Errorf("wait: %+v", res)
	}
	if err := c.Signal(ctx, 0); !IsCode(err, CodeInvalid) {
		t.Errorf("signal 0: %v", err)
	}
}

func TestProtocolErrors(t *testing.T) {
	_, sock := serve(t, newTestBackend())
	ctx := context.Background()

	// A client of another major version is refused with a clear message.
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fw := &frameWriter{w: conn}
	fw.writeJSON(Hello{Protocol: ProtocolName, Version: 99})
	p, err := newFrameReader(conn).next()
	conn.Close()
	if err != nil || !strings.Contains(string(p), "same gvx release") {
		t.Errorf("version mismatch: %q %v", p, err)
	}

	// Unknown methods are refused, the connection stays.
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.call(ctx, "teleport", struct{}{}, nil); !IsCode(err, CodeUnsupported) {
		t.Errorf("unknown method: %v", err)
	}
	if _, out, _ := run(t, c, ExecRequest{Exec: spec.Exec{Argv: []string{"echo", "fine"}}}, nil); out != "fine\n" {
		t.Errorf("after an unknown method: %q", out)
	}

	// A peer that is not a gvx client gets nothing and is dropped.
	conn, _ = net.Dial("unix", sock)
	conn.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _ := conn.Read(make([]byte, 10))
	conn.Close()
	if n != 0 {
		t.Errorf("a non-gvx peer got %d bytes", n)
	}
}

func TestServerGoneFailsCalls(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, _ := net.Listen("unix", sock)
	ctx, cancel := context.WithCancel(context.Background())
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, _ := l.Accept()
		accepted <- conn
		NewServer(newTestBackend()).ServeConn(ctx, conn)
	}()
	c, err := Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error)
	go func() {
		_, err := c.Exec(context.Background(), ExecRequest{Exec: spec.Exec{Argv: []string{"sleep"}}}, ExecIO{})
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	(<-accepted).Close() // the sandbox dies
	cancel()
	select {
	case err := <-errc:
		if !IsCode(err, CodeUnavailable) || !strings.Contains(err.Error(), "closed the control connection") {
			t.Errorf("exec when the sandbox died: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("exec hangs after the sandbox died")
	}
	<-c.Done()
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestCheckpointStream carries a snapshot of several frames to the client
// and the Stop flag to the backend; a backend's refusal is the request's
// error.
func TestCheckpointStream(t *testing.T) {
	b := newTestBackend()
	c, _ := serve(t, b)
	ctx := context.Background()
	if _, err := c.Checkpoint(ctx, CheckpointRequest{}, io.Discard); !IsCode(err, CodeInvalid) {
		t.Fatalf("checkpoint the backend refuses: %v", err)
	}
	snap := make([]byte, 2*MaxData+3)
	rand.Read(snap)
	b.mu.Lock()
	b.files["snapshot"] = snap
	b.mu.Unlock()
	var got bytes.Buffer
	res, err := c.Checkpoint(ctx, CheckpointRequest{Stop: true}, &got)
	if err != nil || res.Bytes != int64(len(snap)) || !bytes.Equal(got.Bytes(), snap) {
		t.Fatalf("checkpoint: %+v %v, %d bytes of %d", res, err, got.Len(), len(snap))
	}
	b.mu.Lock()
	stopped := b.stopped
	b.mu.Unlock()
	if !stopped {
		t.Error("the backend did not see Stop")
	}
	if _, err := c.Checkpoint(ctx, CheckpointRequest{}, failingWriter{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("checkpoint into a failing writer: %v", err)
	}
}

// TestWaitAnsweredWhileRequestsArrive calls WaitAnswered again and again,
// as a sandbox that ends does once, while requests keep arriving on the
// server: a request that starts as the count of those in progress falls to
// zero must neither crash the server nor be waited for wrongly.
func TestWaitAnsweredWhileRequestsArrive(t *testing.T) {
	srv := NewServer(newTestBackend())
	c, _ := serveWith(t, srv)
	stop := make(chan struct{})
	waited := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				waited <- n
				return
			default:
			}
			srv.WaitAnswered(time.Millisecond)
			n++
		}
	}()
	for i := 0; i < 3000; i++ {
		if _, err := c.Stats(context.Background()); err != nil {
			close(stop)
			t.Fatalf("request %d: %v", i, err)
		}
	}
	close(stop)
	if n := <-waited; n == 0 {
		t.Fatal("WaitAnswered never returned while requests were served")
	}
	// Quiet now: it returns at once.
	done := make(chan struct{})
	go func() { srv.WaitAnswered(time.Minute); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("WaitAnswered on a quiet server did not return")
	}
}

func TestStartAndSignalTheJob(t *testing.T) {
	b := newTestBackend()
	c, _ := serve(t, b)
	ctx := context.Background()
	r, err := c.Start(ExecRequest{Exec: spec.Exec{Argv: []string{"sleep"}}}, ExecIO{})
	if err != nil {
		t.Fatal(err)
	}
	// The job's signal must not reach the command itself: the sleep
	// ends only with the second, plain signal.
	if err := r.Signal(ctx, int(syscall.SIGINT), true); err != nil {
		t.Fatalf("signal the job: %v", err)
	}
	if err := r.Signal(ctx, int(syscall.SIGKILL), false); err != nil {
		t.Fatalf("signal the command: %v", err)
	}
	res, err := r.Wait(ctx)
	if err != nil || res.ExitCode != 137 {
		t.Fatalf("wait: %+v %v, want exit code 137 (the SIGKILL)", res, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !slices.Equal(b.jobSignals, []int{int(syscall.SIGINT)}) {
		t.Errorf("the job's signals: %v, want [SIGINT]", b.jobSignals)
	}
	if err := c.call(ctx, MethodSignal, SignalRequest{Signal: 2, Descendants: true}, nil); !IsCode(err, CodeInvalid) {
		t.Errorf("descendants of init: %v, want invalid", err)
	}
}

// TestSignalWhileStarting: a signal that arrives while the command is
// still being created reaches it once it runs, rather than failing with
// "no running exec" and leaving a command its client meant to kill.
func TestSignalWhileStarting(t *testing.T) {
	b := newTestBackend()
	b.gate = make(chan struct{})
	c, _ := serve(t, b)
	ctx := context.Background()
	r, err := c.Start(ExecRequest{Exec: spec.Exec{Argv: []string{"gated-sleep"}}}, ExecIO{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Signal(ctx, int(syscall.SIGKILL), false); err != nil {
		t.Fatalf("signal while starting: %v", err)
	}
	close(b.gate)
	if res, err := r.Wait(ctx); err != nil || res.ExitCode != 137 {
		t.Fatalf("wait: %+v %v, want exit code 137 (the early SIGKILL)", res, err)
	}
}
