package sentry

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/eventually"
	"z.gfire.dev/gvx/core/sentry/internal/busyboxroot"
)

// imagePath is the busybox image every test boots, built once in TestMain.
var imagePath string

func TestMain(m *testing.M) {
	if helper := os.Getenv(helperEnv); helper != "" {
		os.Exit(runHelper(helper))
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if path := os.Getenv(imageEnv); path != "" {
		// A child test binary (the hostile harness) reuses its parent's.
		imagePath = path
		return m.Run()
	}
	if reason := busyboxroot.Available(); reason != "" {
		fmt.Fprintf(os.Stderr, "SKIP core/sentry tests: %s\n", reason)
		return 0
	}
	removeStaleTempDirs()
	dir, err := tempDir("image")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	imagePath = filepath.Join(dir, "busybox.erofs")
	if err := busyboxroot.Build(imagePath, busyboxroot.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// tempDirPrefix starts the names of the host directories the tests create
// outside t.TempDir (they must be reachable by uid 65534 or a container);
// the creating process's ID follows, so a later run can remove what a
// crashed or timed-out run left behind.
const tempDirPrefix = "gvx-sentry-test-"

// tempDir creates a world-readable directory for this process.
func tempDir(what string) (string, error) {
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-%s-", tempDirPrefix, os.Getpid(), what))
	if err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o755)
}

// removeStaleTempDirs removes the directories of test processes that no
// longer exist.
func removeStaleTempDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
	for _, m := range matches {
		rest := strings.TrimPrefix(filepath.Base(m), tempDirPrefix)
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			os.RemoveAll(m)
		}
	}
}

// newSandbox boots a sandbox for t, without host lockdown (the test process
// must keep working afterwards), and closes it when t ends.
func newSandbox(t testing.TB, cfg Config) *Sandbox {
	t.Helper()
	img, err := os.Open(imagePath)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	cfg.Image = img
	cfg.DisableLockdown = true
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// result is a finished process's status and output.
type result struct {
	status ExitStatus
	stdout string
	stderr string
}

// run starts spec as init and waits for it.
func startAndWait(t testing.TB, s *Sandbox, spec ProcessSpec) result {
	t.Helper()
	var out, errb bytes.Buffer
	if spec.Stdout == nil {
		spec.Stdout = &out
	}
	if spec.Stderr == nil {
		spec.Stderr = &errb
	}
	p, err := s.Start(spec)
	if err != nil {
		t.Fatalf("Start(%q): %v", spec.Argv, err)
	}
	return waitResult(t, p, &out, &errb)
}

// execAndWait runs spec in a started sandbox and waits for it.
func execAndWait(t testing.TB, s *Sandbox, spec ProcessSpec) result {
	t.Helper()
	var out, errb bytes.Buffer
	if spec.Stdout == nil {
		spec.Stdout = &out
	}
	if spec.Stderr == nil {
		spec.Stderr = &errb
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := s.Exec(ctx, spec)
	if err != nil {
		t.Fatalf("Exec(%q): %v", spec.Argv, err)
	}
	return waitResult(t, p, &out, &errb)
}

func waitResult(t testing.TB, p *Process, out, errb *bytes.Buffer) result {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		t.Fatalf("process %d did not finish within a minute", p.PID())
	}
	st, err := p.Wait()
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return result{status: st, stdout: out.String(), stderr: errb.String()}
}

// sh returns a spec running script with busybox sh.
func sh(script string) ProcessSpec {
	return ProcessSpec{Argv: []string{"/bin/sh", "-c", script}}
}

// startIdle starts an init that sleeps until killed, so execs can run.
func startIdle(t testing.TB, s *Sandbox) *Process {
	t.Helper()
	p, err := s.Start(ProcessSpec{Argv: []string{"/bin/sleep", "1000000"}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return p
}

func lines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }

// syncBuffer is a bytes.Buffer safe for a relay to write while a test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls until cond holds, failing t after a minute.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	eventually.Within(t, time.Minute, "waiting for "+what, func() (bool, error) { return cond(), nil })
}
