package gvx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"golang.org/x/sys/unix"
	"z.gfire.dev/gvx/core/internal/hostile"
	"z.gfire.dev/gvx/core/internal/testimage"
	"z.gfire.dev/gvx/core/lockdown"
	"z.gfire.dev/gvx/core/spec"
)

// These tests boot real sandboxes: rungv built from this tree, the Sentry,
// the test image from Debian's busybox-static.

var (
	rungvBin  string
	imageRef  string
	testCache string
)

const helperEnv = "GVX_SDK_TEST_HELPER"

// Environment of a re-run of this suite (hostile harness, container): the
// rungv binary and the image layout the parent prepared.
const (
	rungvEnv = "GVX_SDK_TEST_RUNGV"
	imageEnv = "GVX_SDK_TEST_IMAGE"
	// sharedRungvEnv names a rungv built from this tree for the whole test
	// run (make test-go sets it to build/rungv); unset, the tests build
	// their own.
	sharedRungvEnv = "GVX_TEST_RUNGV"
)

func TestMain(m *testing.M) {
	hostile.Harness()
	switch os.Getenv(helperEnv) {
	case "":
	case fdLimitHelper:
		os.Exit(fdLimitHelperMain())
	default:
		os.Exit(helperMain())
	}
	dir, err := os.MkdirTemp("", "gvx-sdk-test-")
	if err != nil {
		panic(err)
	}
	testCache = filepath.Join(dir, "cache")
	rungvBin, imageRef = os.Getenv(rungvEnv), os.Getenv(imageEnv)
	if rungvBin == "" {
		rungvBin = os.Getenv(sharedRungvEnv)
		if rungvBin == "" {
			rungvBin = filepath.Join(dir, "rungv")
			cmd := exec.Command("go", "build", "-o", rungvBin, "../cmd/rungv")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "building rungv: %v\n%s", err, out)
				os.Exit(1)
			}
		}
		b, err := testimage.Build()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		imageRef = b.LayoutRef()
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func config() Config {
	return Config{Sandbox: spec.Sandbox{Image: imageRef, KeepAlive: true}, Rungv: rungvBin, Cache: testCache}
}

// rungvSpec returns the spec that New hands rungv for cfg, as rungv reads
// it from the memfd.
func rungvSpec(t *testing.T, cfg Config) spec.Sandbox {
	t.Helper()
	sp, err := cfg.check()
	if err != nil {
		t.Fatal(err)
	}
	f, err := specFile(&sp)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got spec.Sandbox
	if err := json.NewDecoder(f).Decode(&got); err != nil {
		t.Fatalf("decoding the spec rungv gets: %v", err)
	}
	return got
}

func newSandbox(t *testing.T, cfg Config) *Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

func sh(t *testing.T, sb *Sandbox, script string, opts *ExecOptions) *ExecResult {
	t.Helper()
	res, err := sb.Exec(context.Background(), []string{"/bin/sh", "-c", script}, opts)
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return res
}

func TestExec(t *testing.T) {
	sb := newSandbox(t, config())
	if info := sb.Info(); info.PID != sb.PID() || info.Image == "" {
		t.Errorf("Info() = %+v (rungv pid %d)", info, sb.PID())
	}
	res := sh(t, sb, "echo out; echo err >&2", nil)
	if string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 0 {
		t.Errorf("echo: %+v", res)
	}
	for script, want := range map[string]int{"exit 0": 0, "exit 1": 1, "kill -9 $$": 137} {
		if res := sh(t, sb, script, nil); res.ExitCode != want {
			t.Errorf("%q: exit %d, want %d", script, res.ExitCode, want)
		}
	}
	res = sh(t, sb, `echo "$GVX_TEST $FOO $(pwd) $(id -u):$(id -g)"`, &ExecOptions{Exec: spec.Exec{
		Env: []string{"FOO=bar", "GVX_TEST=set"}, Cwd: "/tmp", User: "65534:65534"}})
	if got := strings.TrimSpace(string(res.Stdout)); got != "set bar /tmp 65534:65534" {
		t.Errorf("env/cwd/user: %q", got)
	}
	// Env adds to the image's environment.
	if res := sh(t, sb, `echo $GVX_TEST $PATH $ADDED`, &ExecOptions{Exec: spec.Exec{Env: []string{"ADDED=yes"}}}); strings.TrimSpace(string(res.Stdout)) != "1 /usr/bin:/bin yes" {
		t.Errorf("image env plus Env: %q", res.Stdout)
	}
	res = sh(t, sb, "tr a-z A-Z", &ExecOptions{Stdin: strings.NewReader("piped input")})
	if string(res.Stdout) != "PIPED INPUT" {
		t.Errorf("stdin: %q", res.Stdout)
	}
	res = sh(t, sb, "yes | head -c 5000000", &ExecOptions{MaxOutput: 1000})
	if !res.Truncated || len(res.Stdout) > 1100 || !bytes.HasPrefix(res.Stdout, []byte("y\ny\n")) {
		t.Errorf("MaxOutput: truncated %v, %d bytes kept", res.Truncated, len(res.Stdout))
	}
}

// TestExecUmask: ExecOptions' Umask reaches the command through rungv, as
// the mask of the files it creates; unset, it is 022, and one out of range
// is refused naming the field.
func TestExecUmask(t *testing.T) {
	sb := newSandbox(t, config())
	const script = "umask; touch /tmp/f-$$; stat -c %a /tmp/f-$$"
	private := 0o077
	if res := sh(t, sb, script, &ExecOptions{Exec: spec.Exec{Umask: &private}}); string(res.Stdout) != "0077\n600\n" {
		t.Errorf("umask 0o077: %q %q", res.Stdout, res.Stderr)
	}
	if res := sh(t, sb, script, nil); string(res.Stdout) != "0022\n644\n" {
		t.Errorf("no umask: %q %q", res.Stdout, res.Stderr)
	}
	wide := 0o1000
	_, err := sb.Exec(context.Background(), []string{"true"}, &ExecOptions{Exec: spec.Exec{Umask: &wide}})
	if !IsCode(err, CodeInvalid) || !strings.Contains(err.Error(), "exec spec: umask: 512") {
		t.Errorf("umask 0o1000: %v; want an invalid-argument error naming umask", err)
	}
}

// TestExecStderrToStdout: ExecOptions' StderrToStdout reaches the command
// through rungv: its stderr arrives on stdout in the order written, and a
// command that cannot start says why on stdout too.
func TestExecStderrToStdout(t *testing.T) {
	sb := newSandbox(t, config())
	merged := &ExecOptions{Exec: spec.Exec{StderrToStdout: true}}
	if res := sh(t, sb, "echo a; echo b >&2; echo c", merged); string(res.Stdout) != "a\nb\nc\n" || len(res.Stderr) != 0 {
		t.Errorf("merged: stdout %q stderr %q; want \"a\\nb\\nc\\n\" and no stderr", res.Stdout, res.Stderr)
	}
	if res := sh(t, sb, "echo a; echo b >&2", nil); string(res.Stdout) != "a\n" || string(res.Stderr) != "b\n" {
		t.Errorf("not merged: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	res, err := sb.Exec(context.Background(), []string{"no-such-cmd"}, merged)
	if err != nil || res.ExitCode != 127 || !strings.Contains(string(res.Stdout), "no-such-cmd") || len(res.Stderr) != 0 {
		t.Errorf("missing command, merged: %v %+v; want 127 and why on stdout", err, res)
	}
}

// TestExecMissingCommand: a command that does not exist or cannot be run
// is, as with docker exec and sh, a result with exit code 127 or 126 and
// why on stderr, the same whether given as argv or to a shell.
func TestExecMissingCommand(t *testing.T) {
	sb := newSandbox(t, config())
	sh(t, sb, "echo data > /tmp/not-executable", nil)
	for _, c := range []struct {
		argv      []string
		code      int
		stderr    string
		shellCode int
	}{
		{[]string{"no-such-cmd", "arg"}, 127, `gvx: exec: "no-such-cmd": executable file not found in $PATH` + "\n", 127},
		{[]string{"/no/such/cmd"}, 127, `gvx: exec: "/no/such/cmd": no such file or directory` + "\n", 127},
		{[]string{"/tmp/not-executable"}, 126, `gvx: exec: "/tmp/not-executable": permission denied` + "\n", 126},
	} {
		res, err := sb.Exec(context.Background(), c.argv, nil)
		if err != nil {
			t.Errorf("%q: %v, want a result with exit code %d", c.argv, err, c.code)
			continue
		}
		if res.ExitCode != c.code || string(res.Stderr) != c.stderr || len(res.Stdout) != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, stderr %q", c.argv, res.ExitCode, res.Stdout, res.Stderr, c.code, c.stderr)
		}
		if res := sh(t, sb, c.argv[0], nil); res.ExitCode != c.shellCode {
			t.Errorf("sh -c %q: exit %d, want %d like the argv form", c.argv[0], res.ExitCode, c.shellCode)
		}
	}
	// The sandbox goes on.
	if res := sh(t, sb, "echo alive", nil); string(res.Stdout) != "alive\n" {
		t.Fatalf("after the missing commands: %+v", res)
	}
}

func TestExecTimeoutKillsTheCommandNotTheSandbox(t *testing.T) {
	sb := newSandbox(t, config())
	res := sh(t, sb, "sleep 30", &ExecOptions{Exec: spec.Exec{Timeout: spec.Seconds(300 * time.Millisecond)}})
	if !res.TimedOut || res.ExitCode != 137 {
		t.Fatalf("timeout: %+v", res)
	}
	if res := sh(t, sb, "echo alive", nil); string(res.Stdout) != "alive\n" {
		t.Fatalf("after the timeout: %+v", res)
	}
}

// TestAnEndedExecLeavesNothingRunning times out and cancels shell commands
// whose real work is a child: the child must end with the exec, whether it
// holds the exec's stdout, let go of it, left the session with setsid, or
// is a grandchild.
func TestAnEndedExecLeavesNothingRunning(t *testing.T) {
	sb := newSandbox(t, config())
	busy := `sh -c ': gvx-busy-marker; while :; do :; done'`
	scripts := map[string]string{
		"child holding stdout":   busy + " & wait",
		"child without stdout":   busy + " >/dev/null 2>&1 </dev/null & wait",
		"child in a new session": "setsid " + busy + " >/dev/null 2>&1 & wait",
		"grandchild":             `sh -c "` + busy + ` & wait" & wait`,
	}
	for name, script := range scripts {
		t.Run("timeout/"+name, func(t *testing.T) {
			res := sh(t, sb, script, &ExecOptions{Exec: spec.Exec{Timeout: spec.Seconds(300 * time.Millisecond)}})
			if !res.TimedOut || res.ExitCode != 137 {
				t.Fatalf("timeout: %+v", res)
			}
			waitNoneRunning(t, sb, "gvx-busy-marker")
		})
		t.Run("cancel/"+name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := sb.Exec(ctx, []string{"/bin/sh", "-c", script}, nil)
				done <- err
			}()
			waitRunning(t, sb, "gvx-busy-marker")
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled exec: %v", err)
			}
			waitNoneRunning(t, sb, "gvx-busy-marker")
		})
	}
}

// guestProcesses counts the guest's live (not zombie) processes whose
// command line contains marker.
func guestProcesses(t *testing.T, sb *Sandbox, marker string) int {
	t.Helper()
	// The pattern is split so that this ps pipeline does not match itself.
	half := len(marker) / 2
	res := sh(t, sb, fmt.Sprintf("ps -o stat,args | grep -v '^Z' | grep -c '%s''%s'", marker[:half], marker[half:]), nil)
	n, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("counting processes: %+v", res)
	}
	return n
}

// waitNoneRunning waits, with a deadline, until no guest process matches
// marker. A signal takes effect asynchronously, so the exec's answer may
// come a moment before its last process is gone.
func waitNoneRunning(t *testing.T, sb *Sandbox, marker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n := guestProcesses(t, sb, marker); n > 0; n = guestProcesses(t, sb, marker) {
		if time.Now().After(deadline) {
			t.Fatalf("%d processes of the ended exec still run 10 s later:\n%s", n, sh(t, sb, "ps -o pid,ppid,stat,args", nil).Stdout)
		}
	}
}

// waitRunning waits, with a deadline, until a guest process matches marker.
func waitRunning(t *testing.T, sb *Sandbox, marker string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for guestProcesses(t, sb, marker) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no process matching %q started within 30 s", marker)
		}
	}
}

// TestExecTimeoutHoldsWhenTheSandboxDoesNotAnswer stops rungv (SIGSTOP),
// as a sandbox stalled inside gVisor looks to its client: an exec with a
// timeout still returns, shortly after timeout plus execAnswerGrace, with
// an error that says so, and the sandbox works again once it answers.
func TestExecTimeoutHoldsWhenTheSandboxDoesNotAnswer(t *testing.T) {
	sb := newSandbox(t, config())
	if err := syscall.Kill(sb.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(sb.PID(), syscall.SIGCONT)
		}
	}()
	const timeout = 500 * time.Millisecond
	start := time.Now()
	_, err := sb.Exec(context.Background(), []string{"true"}, &ExecOptions{Exec: spec.Exec{Timeout: spec.Seconds(timeout)}})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("exec in a stopped sandbox: got %v, want a deadline error saying the sandbox did not answer", err)
	}
	if took > timeout+execAnswerGrace+5*time.Second {
		t.Errorf("exec returned after %v, long after its timeout %v plus %v", took, timeout, execAnswerGrace)
	}
	syscall.Kill(sb.PID(), syscall.SIGCONT)
	stopped = false
	if res := sh(t, sb, "echo alive", nil); string(res.Stdout) != "alive\n" {
		t.Fatalf("after SIGCONT: %+v", res)
	}
}

func TestParallelExecs(t *testing.T) {
	sb := newSandbox(t, config())
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sb.Exec(context.Background(), []string{"/bin/sh", "-c", "echo $0; cat", strconv.Itoa(i)},
				&ExecOptions{Stdin: strings.NewReader(strings.Repeat("x", i))})
			switch {
			case err != nil:
				errs <- err
			case string(res.Stdout) != fmt.Sprintf("%d\n%s", i, strings.Repeat("x", i)):
				errs <- fmt.Errorf("exec %d got %q", i, res.Stdout)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// heldWriter is an exec's stdout that takes nothing until released, as a
// Python callback waiting for the GIL does.
type heldWriter struct {
	started chan struct{} // closed at the first Write
	release chan struct{}
	once    sync.Once
	buf     bytes.Buffer
}

func newHeldWriter() *heldWriter {
	return &heldWriter{started: make(chan struct{}), release: make(chan struct{})}
}

// Write implements io.Writer.
func (w *heldWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.started) })
	<-w.release
	return w.buf.Write(p)
}

// TestASlowOutputWriterStallsOnlyItsExec: a writer that takes an exec's
// output slowly holds up that exec alone. The sandbox's other requests on
// the same connection (another exec, a stat, a file read) complete while
// it is held, and once released it gets all of the output, in order.
func TestASlowOutputWriterStallsOnlyItsExec(t *testing.T) {
	sb := newSandbox(t, config())
	ctx := context.Background()
	if _, err := sb.WriteFile(ctx, "/tmp/note", strings.NewReader("note"), WriteOptions{Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	// More output than the sandbox may send ahead of the writer, so that
	// the command itself is held back.
	const lines = 1000000
	held := newHeldWriter()
	type result struct {
		res *ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := sb.Exec(ctx, []string{"seq", "1", strconv.Itoa(lines)}, &ExecOptions{Stdout: held})
		done <- result{res, err}
	}()
	select {
	case <-held.started:
	case <-time.After(30 * time.Second):
		close(held.release)
		t.Fatal("the held exec's output did not reach its writer within 30 s")
	}

	others, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if res, err := sb.Exec(others, []string{"true"}, nil); err != nil || res.ExitCode != 0 {
		t.Errorf("exec true beside a held writer: %+v, %v (stalled behind the other exec's output?)", res, err)
	}
	if info, err := sb.Stat(others, "/tmp/note"); err != nil || info.Size != 4 {
		t.Errorf("stat beside a held writer: %+v, %v", info, err)
	}
	if got, err := sb.ReadFile(others, "/tmp/note"); err != nil || string(got) != "note" {
		t.Errorf("read file beside a held writer: %q, %v", got, err)
	}
	select {
	case r := <-done:
		t.Fatalf("the held exec ended before its writer took its output: %+v, %v", r.res, r.err)
	default:
	}

	close(held.release)
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the released exec did not end within 60 s")
	}
	if r.err != nil || r.res.ExitCode != 0 {
		t.Fatalf("seq: %+v, %v", r.res, r.err)
	}
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		fmt.Fprintln(&want, i)
	}
	if !bytes.Equal(held.buf.Bytes(), want.Bytes()) {
		t.Errorf("the held writer got %d bytes, not seq's %d in order", held.buf.Len(), want.Len())
	}
}

func TestFiles(t *testing.T) {
	sb := newSandbox(t, config())
	ctx := context.Background()
	data := bytes.Repeat([]byte("gvx\n"), 300000)
	if _, err := sb.WriteFile(ctx, "/tmp/data.txt", bytes.NewReader(data), WriteOptions{Mode: 0o640}); err != nil {
		t.Fatal(err)
	}
	got, err := sb.ReadFile(ctx, "/tmp/data.txt")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}
	if res := sh(t, sb, "wc -l < /tmp/data.txt; stat -c %a /tmp/data.txt", nil); strings.Fields(string(res.Stdout))[0] != "300000" || strings.Fields(string(res.Stdout))[1] != "640" {
		t.Errorf("the guest sees %q", res.Stdout)
	}
	// A source that fails after some of the content leaves the file as it
	// was: the sandbox is told the stream was cut short, and drops what
	// it had written.
	broken := io.MultiReader(bytes.NewReader(data[:400000]), iotest.ErrReader(errors.New("the source broke")))
	if _, err := sb.WriteFile(ctx, "/tmp/data.txt", broken, WriteOptions{Mode: 0o600}); err == nil || !strings.Contains(err.Error(), "the source broke") {
		t.Errorf("WriteFile of a failing source: %v", err)
	}
	if got, err := sb.ReadFile(ctx, "/tmp/data.txt"); err != nil || !bytes.Equal(got, data) {
		t.Errorf("after a failed write, read back %d bytes, %v; want the %d written before", len(got), err, len(data))
	}
	if res := sh(t, sb, "stat -c %a /tmp/data.txt; ls -A /tmp", nil); string(res.Stdout) != "640\ndata.txt\n" {
		t.Errorf("after a failed write, the guest sees %q", res.Stdout)
	}
	st, err := sb.Stats(ctx)
	if err != nil || st.MemoryUsage < uint64(len(data)) || st.Tasks < 1 {
		t.Errorf("stats after writing 1.2 MB: %+v %v", st, err)
	}
	info, err := sb.Stat(ctx, "/bin/busybox")
	if err != nil || info.Mode&0o111 == 0 || info.Size < 100000 {
		t.Errorf("stat busybox: %+v %v", info, err)
	}
	if _, err := sb.ReadFile(ctx, "/no/such/file"); !IsCode(err, CodeNotFound) {
		t.Errorf("missing file: %v", err)
	}
}

func TestRunReturnsTheCommandsExitCode(t *testing.T) {
	var out bytes.Buffer
	cfg := config()
	cfg.KeepAlive = false
	cfg.Cmd = []string{"/bin/sh", "-c", "echo from init; exit 7"}
	cfg.Stdout = &out
	sb := newSandbox(t, cfg)
	code, err := sb.Run(context.Background())
	if err != nil || code != 7 {
		t.Fatalf("Run: %d, %v", code, err)
	}
	sb.Close()
	if out.String() != "from init\n" {
		t.Errorf("init's stdout: %q", out.String())
	}
}

func TestCloseIsIdempotentAndFinal(t *testing.T) {
	sb := newSandbox(t, config())
	pid := sb.PID()
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("rungv %d still runs after Close", pid)
	}
	if _, err := sb.Exec(context.Background(), []string{"true"}, nil); !IsCode(err, CodeUnavailable) {
		t.Errorf("exec after Close: %v", err)
	}
}

// TestEachSandboxIsASessionOfItsOwn: rungv runs in a session of its own,
// so that the kernel's autogroup scheduling weighs each sandbox as one
// group rather than every sandbox of the caller as one (the fleet stalls
// under CPU-bound neighbours, benchmarks/README).
func TestEachSandboxIsASessionOfItsOwn(t *testing.T) {
	a, b := newSandbox(t, config()), newSandbox(t, config())
	for _, sb := range []*Sandbox{a, b} {
		sid, err := unix.Getsid(sb.PID())
		if err != nil {
			t.Fatal(err)
		}
		if sid != sb.PID() {
			t.Errorf("rungv %d is in session %d; want a session of its own", sb.PID(), sid)
		}
	}
	// The file is missing on a kernel without autogroups, and empty for a
	// process in the kernel's default autogroup (one whose session goes
	// back to init without a setsid, as a CI runner's may).
	group := func(pid string) (string, bool) {
		b, err := os.ReadFile("/proc/" + pid + "/autogroup")
		if err != nil {
			return "", false
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			return f[0], true
		}
		return "the default autogroup", true
	}
	self, ok := group("self")
	if !ok {
		t.Logf("this kernel has no autogroups (no /proc/self/autogroup); checked the sessions only")
		return
	}
	ga, _ := group(fmt.Sprint(a.PID()))
	gb, _ := group(fmt.Sprint(b.PID()))
	if ga == self || gb == self || ga == gb {
		t.Errorf("autogroups: this process %s, sandboxes %s and %s; want three different", self, ga, gb)
	}
}

// TestSandboxEndedFromOutsideSaysHow: a sandbox that ends because its
// control connection closed without a shutdown, or because rungv got a
// signal, says which in the error of the next call, so that such an end
// in a fleet explains itself.
func TestSandboxEndedFromOutsideSaysHow(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(sb *Sandbox)
		want string
	}{
		{"connection closed", func(sb *Sandbox) { sb.client.Close() }, "the caller closed the control connection without a shutdown"},
		{"SIGTERM", func(sb *Sandbox) { syscall.Kill(sb.PID(), syscall.SIGTERM) }, "received SIGTERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t, config())
			tc.end(sb)
			select {
			case <-sb.exited:
			case <-time.After(30 * time.Second):
				t.Fatalf("rungv %d still runs 30 s after its end began", sb.PID())
			}
			_, err := sb.Exec(context.Background(), []string{"true"}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("exec after the sandbox ended: %v; want the error to say %q", err, tc.want)
			}
		})
	}
}

func TestRungvKilledIsReported(t *testing.T) {
	sb := newSandbox(t, config())
	syscall.Kill(sb.PID(), syscall.SIGKILL)
	_, err := sb.Exec(context.Background(), []string{"true"}, nil)
	if err == nil || !strings.Contains(err.Error(), "killed by SIGKILL") {
		t.Errorf("exec on a sandbox killed by SIGKILL: %v", err)
	}
}

// TestLockdownViolationIsReported has rungv make a forbidden host system
// call after lockdown: the kernel kills it with SIGSYS, and the caller
// says so and what to do.
func TestLockdownViolationIsReported(t *testing.T) {
	cfg := config()
	cfg.extraArgs = []string{"--debug-lockdown-selftest"}
	_, err := New(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "killed by SIGSYS") || !strings.Contains(err.Error(), "please report") {
		t.Fatalf("a rungv killed by its lockdown filter: %v", err)
	}
}

// TestRungvIsLockedDown reads the running rungv's status: no new
// privileges, a seccomp filter, no capabilities.
func TestRungvIsLockedDown(t *testing.T) {
	sb := newSandbox(t, config())
	st, err := lockdown.ReadStatus(sb.PID())
	if err != nil {
		t.Fatal(err)
	}
	if !st.NoNewPrivs || st.Seccomp != 2 || st.CapEff != 0 {
		t.Fatalf("rungv %d status %+v: want NoNewPrivs 1, Seccomp 2, CapEff 0", sb.PID(), st)
	}
}

// coreCases are the tests the hostile and container re-runs must pass.
var coreCases = []string{
	"TestExec", "TestExecTimeoutKillsTheCommandNotTheSandbox", "TestParallelExecs", "TestFiles",
	"TestRunReturnsTheCommandsExitCode", "TestCloseIsIdempotentAndFinal", "TestRungvIsLockedDown",
	"TestNATUDPAndTCPThroughTheSDK", "TestPublishedPortsThroughTheSDK",
}

// shareForRerun copies rungv and the test image where uid 65534 can read
// them, and returns the environment that points a re-run at them.
func shareForRerun(t *testing.T) (string, []string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gvx-sdk-rerun-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	if out, err := exec.Command("cp", "-a", rungvBin, filepath.Join(dir, "rungv")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	// Helpers the re-run cannot build (no Go toolchain cache as uid 65534).
	if err := os.WriteFile(filepath.Join(dir, "nettool"), nettoolBinary(t), 0o755); err != nil {
		t.Fatal(err)
	}
	layout := strings.TrimSuffix(strings.TrimPrefix(imageRef, "oci:"), ":latest")
	if out, err := exec.Command("cp", "-a", layout, filepath.Join(dir, "image")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if out, err := exec.Command("chmod", "-R", "a+rX", dir).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v %s", err, out)
	}
	return dir, []string{rungvEnv + "=" + filepath.Join(dir, "rungv"), imageEnv + "=oci:" + filepath.Join(dir, "image") + ":latest"}
}

// TestUnprivileged re-runs the core cases as uid 65534 with no
// capabilities, under NO_NEW_PRIVS and a seccomp filter that makes user
// namespaces and mounts impossible: what a container host gives.
func TestUnprivileged(t *testing.T) {
	if hostile.Active() || os.Getenv("GVX_IN_DOCKER") != "" {
		t.Skip("already a re-run")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to drop to uid 65534; this run is unprivileged already")
	}
	dir, env := shareForRerun(t)
	log, err := hostile.Rerun(dir, env, "-test.run", "^("+strings.Join(append(coreCases, "TestHostileEnvironment"), "|")+")$")
	if err != nil {
		t.Fatalf("the suite under the hostile harness failed: %v\n%s", err, log)
	}
	if missing := hostile.Passed(log, append(coreCases, "TestHostileEnvironment")...); len(missing) > 0 {
		t.Fatalf("did not pass under the hostile harness: %v\n%s", missing, log)
	}
}

// TestHostileEnvironment checks, in a re-run, that the harness took effect.
func TestHostileEnvironment(t *testing.T) {
	if !hostile.Active() {
		t.Skip("only meaningful under the hostile harness (see TestUnprivileged)")
	}
	st, err := lockdown.ReadStatus(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if os.Getuid() != hostile.Nobody || !st.NoNewPrivs || st.Seccomp != 2 || st.CapEff != 0 {
		t.Fatalf("not hostile: uid %d, status %+v", os.Getuid(), st)
	}
	if err := syscall.Unshare(syscall.CLONE_NEWUSER); err != syscall.EPERM {
		t.Fatalf("unshare(CLONE_NEWUSER) = %v, want EPERM", err)
	}
}

// TestInsideUnprivilegedDocker runs the core cases inside a host
// `docker run --user 65534 --network none` container with Docker's default
// seccomp profile and no added capabilities. The image is
// GVX_TEST_DOCKER_IMAGE (make test loads gvx's default image when it runs
// a docker daemon); the test binary and rungv are static.
func TestInsideUnprivilegedDocker(t *testing.T) {
	if hostile.Active() || os.Getenv("GVX_IN_DOCKER") != "" {
		t.Skip("already a re-run")
	}
	image := os.Getenv("GVX_TEST_DOCKER_IMAGE")
	if image == "" {
		t.Skip("GVX_TEST_DOCKER_IMAGE is not set: no docker image to run the suite in (make test sets it when a docker daemon runs)")
	}
	if err := exec.Command("docker", "image", "inspect", image).Run(); err != nil {
		t.Skipf("docker cannot see image %s: %v", image, err)
	}
	dir, _ := shareForRerun(t)
	self, _ := os.Executable()
	if out, err := exec.Command("cp", self, filepath.Join(dir, "gvx.test")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	os.Chmod(filepath.Join(dir, "gvx.test"), 0o755)
	cmd := exec.Command("docker", "run", "--rm", "--pull", "never", "--user", "65534:65534", "--network", "none",
		"--tmpfs", "/tmp:exec,mode=1777", "-v", dir+":/t:ro",
		"-e", rungvEnv+"=/t/rungv", "-e", imageEnv+"=oci:/t/image:latest", "-e", "GVX_IN_DOCKER=1",
		"--entrypoint", "/t/gvx.test", image,
		"-test.v", "-test.count=1", "-test.timeout=10m", "-test.run", "^("+strings.Join(coreCases, "|")+")$")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the suite inside docker failed: %v\n%s", err, out)
	}
	if missing := hostile.Passed(string(out), coreCases...); len(missing) > 0 {
		t.Fatalf("did not pass inside docker: %v\n%s", missing, out)
	}
}

func TestStartErrorsSayWhy(t *testing.T) {
	cfg := config()
	cfg.Image = "oci:/nonexistent/layout"
	_, err := New(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("missing image: %v", err)
	}
	cfg = config()
	cfg.Rungv = "/nonexistent/rungv"
	if _, err := New(context.Background(), cfg); err == nil {
		t.Error("missing rungv accepted")
	}
	cfg = config()
	cfg.Platform = "quantum"
	if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), `platform: "quantum" is not a platform; use auto, systrap, kvm or ptrace`) {
		t.Errorf("bad platform: %v", err)
	}
}

// TestLateStartErrorsSayWhy checks a start that fails after rungv took over
// the control connection, in the Sentry's boot (a volume that is not an ext4
// image): the error carries rungv's own words, every time, not a report
// that it was killed.
func TestLateStartErrorsSayWhy(t *testing.T) {
	damaged := filepath.Join(t.TempDir(), "damaged.ext4")
	if err := os.WriteFile(damaged, bytes.Repeat([]byte("not an ext4 image "), 1<<16), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config()
	cfg.Mounts = []spec.Mount{{Type: spec.MountVolume, Source: damaged, Target: "/data"}}
	for range 10 {
		_, err := New(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), "superblock") || strings.Contains(err.Error(), "SIGKILL") {
			t.Fatalf("a damaged volume: %v", err)
		}
	}
}

// TestStartErrorsLeadWithRungvsWords: when rungv refuses to start, the
// error is rungv's reason and how it exited, not the control handshake that
// its exit broke.
func TestStartErrorsLeadWithRungvsWords(t *testing.T) {
	cfg := config()
	cfg.Image = "oci:/nonexistent-gvx-test-layout:latest"
	_, err := New(context.Background(), cfg)
	want := `gvx: starting the sandbox: rungv: OCI layout "/nonexistent-gvx-test-layout"`
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), "(rungv exited with status 1)") ||
		strings.Contains(err.Error(), "handshake") {
		t.Fatalf("a missing image: %v", err)
	}
	for stderr, want := range map[string]string{
		"rungv: bad flag\n":                           "rungv: bad flag",
		"pulling…\nrungv: no such image\n":            "rungv: no such image",
		"rungv: first\nrungv: last: a\nsecond line\n": "rungv: last: a\nsecond line",
		"panic: something else\n":                     "",
		"":                                            "",
	} {
		if got := rungvError(stderr); got != want {
			t.Errorf("rungvError(%q) = %q, want %q", stderr, got, want)
		}
	}
}

// TestCrashReportsLeadWithTheirHeadline: when rungv crashes, the error
// shows the Go crash report's headline and first stack, not the tail of a
// dump of every goroutine, and says how to raise the limit that caused it.
// rungv here is a script that writes such a report, as a rungv refused a
// thread by the host does.
func TestCrashReportsLeadWithTheirHeadline(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "rungv")
	script := `#!/bin/sh
{
echo 'rungv: booting'
echo 'runtime: failed to create new OS thread (have 9 already; errno=11)'
echo 'runtime: may need to increase max user processes (ulimit -u)'
echo 'fatal error: newosproc'
echo
echo 'runtime stack:'
echo 'runtime.throw()'
echo
i=0
while [ $i -lt 3000 ]; do printf 'goroutine %d [select]:\n\tx.go:1\n\n' $i; i=$((i+1)); done
} >&2
exit 2
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := config()
	cfg.Rungv = fake
	_, err := New(context.Background(), cfg)
	if err == nil {
		t.Fatal("a crashing rungv started")
	}
	msg := err.Error()
	for _, want := range []string{
		"rungv crashed:\nruntime: failed to create new OS thread (have 9 already; errno=11)\nruntime: may need to increase max user processes (ulimit -u)\nfatal error: newosproc\n\nruntime stack:\nruntime.throw()\n",
		"… and 9000 more lines", "(rungv exited with status 2)", "each sandbox runs about 15",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "goroutine 2999") || len(msg) > 2000 {
		t.Errorf("the error carries the dump's tail (%d bytes):\n%s", len(msg), msg)
	}
}

// TestNoOrphansWhenTheCallerDies kills a process that owns a sandbox with
// SIGKILL; its rungv must die too.
func TestNoOrphansWhenTheCallerDies(t *testing.T) {
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "GVX_TEST_RUNGV="+rungvBin, "GVX_TEST_IMAGE="+imageRef, "GVX_TEST_CACHE="+testCache)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(stdout.String(), "\n") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the helper never reported its sandbox")
		}
		time.Sleep(20 * time.Millisecond)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(stdout.String()))
	if err != nil {
		t.Fatalf("helper said %q", stdout.String())
	}
	cmd.Process.Kill()
	cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("rungv %d outlived its killed parent", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunningOutOfFilesSaysWhichLimit starts sandboxes in a process whose
// RLIMIT_NOFILE is 64 until one fails: the error must name the limit, say
// that each sandbox holds files, and say how to raise it.
func TestRunningOutOfFilesSaysWhichLimit(t *testing.T) {
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+fdLimitHelper, "GVX_TEST_RUNGV="+rungvBin, "GVX_TEST_IMAGE="+imageRef, "GVX_TEST_CACHE="+testCache)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{"too many open files", "RLIMIT_NOFILE allows (64,", "each live sandbox keeps", "ulimit -n", "resource.setrlimit"} {
		if !strings.Contains(got, want) {
			t.Errorf("the error when files run out does not say %q: %s", want, got)
		}
	}
}

// fdLimitHelper names the helper mode of TestRunningOutOfFilesSaysWhichLimit.
const fdLimitHelper = "fd-limit"

// fdLimitHelperMain lowers this process's RLIMIT_NOFILE to 64, starts
// sandboxes until New fails and prints that error. It fails if 64 files
// never run out, which would mean sandboxes hold none.
func fdLimitHelperMain() int {
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 64, Max: 64}); err != nil {
		fmt.Println("setrlimit:", err)
		return 1
	}
	cfg := Config{Sandbox: spec.Sandbox{Image: os.Getenv("GVX_TEST_IMAGE"), KeepAlive: true}, Rungv: os.Getenv("GVX_TEST_RUNGV"), Cache: os.Getenv("GVX_TEST_CACHE")}
	var sbs []*Sandbox
	defer func() {
		for _, sb := range sbs {
			sb.Close()
		}
	}()
	for range 64 {
		sb, err := New(context.Background(), cfg)
		if err != nil {
			fmt.Printf("after %d sandboxes: %v\n", len(sbs), err)
			return 0
		}
		sbs = append(sbs, sb)
	}
	fmt.Println("64 sandboxes started with RLIMIT_NOFILE 64")
	return 1
}

// helperMain starts a sandbox, prints rungv's pid and waits to be killed.
func helperMain() int {
	sb, err := New(context.Background(), Config{
		Sandbox: spec.Sandbox{Image: os.Getenv("GVX_TEST_IMAGE"), KeepAlive: true}, Rungv: os.Getenv("GVX_TEST_RUNGV"), Cache: os.Getenv("GVX_TEST_CACHE")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(sb.PID())
	select {}
}

// TestACommandThatEndsAtOnce starts sandboxes whose command exits as soon
// as it starts: New must still complete its handshake with rungv, and Run
// return the command's exit code, however early the command ended.
func TestACommandThatEndsAtOnce(t *testing.T) {
	for i := range 20 {
		cfg := config()
		cfg.KeepAlive = false
		cfg.Cmd = []string{"/bin/sh", "-c", "exit 3"}
		sb, err := New(context.Background(), cfg)
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		code, err := sb.Run(context.Background())
		sb.Close()
		if err != nil || code != 3 {
			t.Fatalf("run %d: exit %d, %v; want 3", i, code, err)
		}
	}
}

// TestConfigIsTheJSONPythonSends: gvx_sandbox_new's JSON, as Python's
// sandbox_config builds it, decodes straight into a Config, strictly: the
// spec's keys and the runner's (rungv, cache, insecure) are the Config's,
// and the caller's streams are not keys.
func TestConfigIsTheJSONPythonSends(t *testing.T) {
	decode := func(s string) (Config, error) {
		var c Config
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		return c, dec.Decode(&c)
	}
	c, err := decode(`{"image": "oci:x:latest", "keep_alive": true, "env": ["A=1"], "platform": "auto", "spin": false,
		"network": "nat", "ports": [{"guest_port": 80}], "memory": 536870912, "cpus": 1.5, "pids_limit": -1, "timeout": 2.5,
		"rungv": "/opt/rungv", "cache": "/var/cache/gvx", "insecure": true}`)
	if err != nil {
		t.Fatal(err)
	}
	off := false
	want := Config{Sandbox: spec.Sandbox{Image: "oci:x:latest", KeepAlive: true, Env: []string{"A=1"}, Platform: "auto", Spin: &off,
		Network: spec.NetworkNAT, Ports: []spec.Port{{GuestPort: 80}}, Memory: 512 << 20, CPUs: 1.5, PidsLimit: -1, Timeout: spec.Seconds(2500 * time.Millisecond)},
		Rungv: "/opt/rungv", Cache: "/var/cache/gvx", Insecure: true}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("decoded\n%+v\nwant\n%+v", c, want)
	}
	for _, key := range []string{"stdout", "Stdin", "extraArgs", "oci_image"} {
		if _, err := decode(`{"image": "x", "` + key + `": null}`); err == nil {
			t.Errorf("the key %q was accepted", key)
		}
	}
}

// TestAFreshSandboxFromConfig: Config returns what the sandbox was started
// with, and New of it is a fresh sandbox, without the old one's writes.
func TestAFreshSandboxFromConfig(t *testing.T) {
	cfg := config()
	cfg.Hostname = "episode"
	sb := newSandbox(t, cfg)
	if !reflect.DeepEqual(sb.Config(), cfg) {
		t.Fatalf("Config() = %+v, want %+v", sb.Config(), cfg)
	}
	sh(t, sb, "echo dirty > /tmp/state", nil)
	fresh := newSandbox(t, sb.Config())
	if res := sh(t, fresh, "hostname; cat /tmp/state", nil); string(res.Stdout) != "episode\n" {
		t.Errorf("the fresh sandbox: %+v", res)
	}
}

// TestSignalNumbers: a number that is no signal is an invalid argument,
// which the sandbox's control server names (capi checked it again, and no
// longer does); a signal reaches the init.
func TestSignalNumbers(t *testing.T) {
	cfg := config()
	cfg.KeepAlive = false
	cfg.Cmd = []string{"/bin/sh", "-c", "trap 'exit 7' USR1; touch /tmp/trapped; while :; do sleep 1; done"}
	sb := newSandbox(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, sig := range []syscall.Signal{0, -1, 65} {
		if err := sb.Signal(ctx, sig); !IsCode(err, CodeInvalid) || !strings.Contains(err.Error(), "is not a signal number (1..64)") {
			t.Errorf("Signal(%d): %v; want it refused as no signal", sig, err)
		}
	}
	for {
		if _, err := sb.Stat(ctx, "/tmp/trapped"); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatalf("the init did not set its trap: %v", err)
		}
	}
	if err := sb.Signal(ctx, syscall.SIGUSR1); err != nil {
		t.Fatalf("Signal(SIGUSR1): %v", err)
	}
	if code, err := sb.Run(ctx); err != nil || code != 7 {
		t.Fatalf("init ended with %d, %v; want 7 from its trap", code, err)
	}
}

// TestExecInAMissingWorkingDirectory: as docker exec, a working directory
// the command cannot enter is its failure (exit code 126, why on stderr),
// not the SDK's (it was an internal error).
func TestExecInAMissingWorkingDirectory(t *testing.T) {
	sb := newSandbox(t, config())
	for _, tc := range []struct{ cwd, why string }{
		{"/nonexistent", "no such file or directory"},
		{"/etc/passwd", "not a directory"},
	} {
		res, err := sb.Exec(context.Background(), []string{"pwd"}, &ExecOptions{Exec: spec.Exec{Cwd: tc.cwd}})
		if err != nil {
			t.Fatalf("exec in %s: %v; want exit code 126", tc.cwd, err)
		}
		want := fmt.Sprintf("gvx: exec: working directory %q: %s\n", tc.cwd, tc.why)
		if res.ExitCode != 126 || string(res.Stderr) != want {
			t.Errorf("exec in %s: exit %d, stderr %q; want 126, %q", tc.cwd, res.ExitCode, res.Stderr, want)
		}
	}
}
