package sentry

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/hostile"
	"z.gfire.dev/gvx/core/internal/proctree"
	"z.gfire.dev/gvx/core/internal/ptytest"
)

// The test binary re-executes itself in helper modes to test what cannot
// happen in the test process: host lockdown (irreversible), an
// unprivileged hostile environment, and kill -9.
const (
	// helperEnv names the helper mode.
	helperEnv = "GVX_SENTRY_TEST_HELPER"
	// imageEnv passes the parent's test image to a child test binary.
	imageEnv = "GVX_SENTRY_TEST_IMAGE"
	// hostileEnv tells a child test binary it runs under the hostile
	// harness, so TestHostileEnvironment checks the harness took effect.
	hostileEnv = "GVX_SENTRY_TEST_HOSTILE"
)

func runHelper(mode string) int {
	var err error
	switch mode {
	case "harness":
		err = runHarness()
	case "locked":
		err = runLocked()
	case "hold":
		err = runHold()
	case "coldstart":
		err = runColdStart()
	case "platform":
		err = runPlatform(Platform(os.Args[len(os.Args)-1]))
	case "stubs":
		err = runStubs()
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

// runHarness is the hostile host: it forbids namespaces and mounts with
// seccomp (EPERM for unshare, setns, mount and clone with any CLONE_NEW*
// flag, ENOSYS for clone3), sets NO_NEW_PRIVS, then replaces itself with
// the test binary running the whole suite. Its parent already dropped it to
// uid 65534 with no capabilities.
func runHarness() error {
	if err := hostile.InstallFilter(); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// Drop the helper mode, or the new image would be the harness again.
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, helperEnv+"=") {
			env = append(env, e)
		}
	}
	env = append(env, hostileEnv+"=1")
	args := append([]string{self}, os.Args[1:]...)
	return syscall.Exec(self, args, env)
}

// openImage opens the test image for a helper.
func openImage() (*os.File, error) {
	path := os.Getenv(imageEnv)
	if path == "" {
		return nil, fmt.Errorf("%s is not set", imageEnv)
	}
	return os.Open(path)
}

// firstWrite is a writer that closes wrote at the first write to it, so
// that a helper can wait for a guest's first output rather than poll for it.
type firstWrite struct {
	once  sync.Once
	wrote chan struct{}
}

func newFirstWrite() *firstWrite { return &firstWrite{wrote: make(chan struct{})} }

// Write implements io.Writer.
func (w *firstWrite) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.wrote) })
	return len(p), nil
}

// runLocked boots a sandbox with host lockdown, reports on stdout, waits
// for a line on stdin (while the parent inspects /proc/<pid>/status), then
// does more work and shuts down.
func runLocked() error {
	img, err := openImage()
	if err != nil {
		return err
	}
	// A host terminal, opened before lockdown denies openat.
	master, replica, err := ptytest.Open()
	if err != nil {
		return err
	}
	t0 := time.Now()
	cfg := Config{Image: img, PidsLimit: 200, MemoryLimit: 256 << 20}
	// GVX_SENTRY_TEST_TRAP=1 turns a filter violation into a Go crash
	// report naming the call, for finding a missing rule.
	cfg.Lockdown.TrapViolations = os.Getenv("GVX_SENTRY_TEST_TRAP") != ""
	s, err := New(cfg)
	img.Close()
	if err != nil {
		return err
	}
	tNew := time.Since(t0)
	initUp := newFirstWrite()
	init, err := s.Start(ProcessSpec{Argv: []string{"/bin/sh", "-c", "echo init-up; exec sleep 1000000"}, Stdout: initUp})
	if err != nil {
		return err
	}
	select {
	case <-initUp.wrote:
	case <-time.After(time.Minute):
		return fmt.Errorf("init wrote nothing within a minute of its start")
	}
	tUp := time.Since(t0)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	fmt.Fprintf(out, "timing new=%v first-output=%v\n", tNew, tUp)
	fmt.Fprintf(out, "locked pid=%d\n", os.Getpid())
	out.Flush()
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}

	ctx := context.Background()
	run := func(spec ProcessSpec) (string, ExitStatus, error) {
		var b strings.Builder
		spec.Stdout = &b
		spec.Stderr = &b
		p, err := s.Exec(ctx, spec)
		if err != nil {
			return "", ExitStatus{}, err
		}
		st, err := p.Wait()
		return b.String(), st, err
	}
	for _, script := range []string{"echo hello from a locked host", "exit 1", "kill -9 $$", "cat /etc/gvx-marker", "id -u; cat /proc/1/comm",
		"mkdir -p /mnt/x && mount -t tmpfs none /mnt/x && echo m > /mnt/x/f && cat /mnt/x/f",
		loopbackRoundTrip("net")} {
		o, st, err := run(sh(script))
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "exec %q: code=%d out=%q\n", script, st.ExitCode(), o)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	good := 0
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, st, err := run(ProcessSpec{Argv: []string{"echo", fmt.Sprint(i)}})
			if err == nil && st.ExitCode() == 0 && o == fmt.Sprintf("%d\n", i) {
				mu.Lock()
				good++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Fprintf(out, "parallel good=%d\n", good)
	if err := s.WriteFile(ctx, "/tmp/host-wrote", []byte("hw"), 0o644); err != nil {
		return err
	}
	o, _, err := run(sh("cat /tmp/host-wrote"))
	if err != nil {
		return err
	}
	data, err := s.ReadFile(ctx, "/etc/gvx-marker")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "files guest-read=%q host-read=%q\n", o, data)
	tp, err := s.Exec(ctx, ProcessSpec{Argv: []string{"/bin/sh", "-c", "test -t 0 && echo tty-ok; stty size"}, Stdin: replica, Stdout: replica, Stderr: replica, TTY: true})
	if err != nil {
		return err
	}
	tst, _ := tp.Wait()
	// The output may arrive in more than one read.
	var ttyOut []byte
	buf := make([]byte, 256)
	master.SetReadDeadline(time.Now().Add(10 * time.Second))
	for !bytes.Contains(ttyOut, []byte("24 80\r\n")) {
		n, err := master.Read(buf)
		ttyOut = append(ttyOut, buf[:n]...)
		if err != nil {
			break
		}
	}
	fmt.Fprintf(out, "tty code=%d out=%q\n", tst.ExitCode(), ttyOut)
	o, st, err := run(sh(`awk 'BEGIN { s = "x"; while (1) s = s s }'`))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "hog code=%d\n", st.ExitCode())

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		return err
	}
	ist, _ := init.Wait()
	fmt.Fprintf(out, "shutdown init=%d\n", ist.ExitCode())
	return nil
}

// runColdStart is what `rungv run IMAGE true` does: boot a locked-down
// sandbox, run one process, report, exit.
func runColdStart() error {
	img, err := openImage()
	if err != nil {
		return err
	}
	t0 := time.Now()
	s, err := New(Config{Image: img})
	img.Close()
	if err != nil {
		return err
	}
	tNew := time.Since(t0)
	p, err := s.Start(ProcessSpec{Argv: []string{"/bin/true"}})
	if err != nil {
		return err
	}
	st, err := p.Wait()
	if err != nil || st.ExitCode() != 0 {
		return fmt.Errorf("true: %v %v", st, err)
	}
	fmt.Printf("done new=%v total=%v\n", tNew.Microseconds(), time.Since(t0).Microseconds())
	return nil
}

// runPlatform boots a locked-down sandbox on p and runs a shell.
func runPlatform(p Platform) error {
	img, err := openImage()
	if err != nil {
		return err
	}
	cfg := Config{Image: img, Platform: p}
	cfg.Lockdown.TrapViolations = os.Getenv("GVX_SENTRY_TEST_TRAP") != ""
	s, err := New(cfg)
	img.Close()
	if err != nil {
		return err
	}
	defer s.Close()
	var out strings.Builder
	proc, err := s.Start(ProcessSpec{Argv: []string{"/bin/sh", "-c", "echo " + string(p) + "-ok; exit 3"}, Stdout: &out})
	if err != nil {
		return err
	}
	st, err := proc.Wait()
	if err != nil {
		return err
	}
	fmt.Printf("%s code=%d\n", strings.TrimSpace(out.String()), st.ExitCode())
	return nil
}

// runStubs boots a systrap sandbox in a fresh process (gVisor's stub pool
// is process-wide) and reports how many child processes, the platform's
// stubs, it has before and after its first two execs.
func runStubs() error {
	img, err := openImage()
	if err != nil {
		return err
	}
	s, err := New(Config{Image: img, DisableLockdown: true})
	img.Close()
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.StartIdle(); err != nil {
		return err
	}
	before := childProcesses()
	for _, argv := range [][]string{{"true"}, {"sh", "-c", "true"}} {
		p, err := s.Exec(context.Background(), ProcessSpec{Argv: argv})
		if err != nil {
			return err
		}
		if st, err := p.Wait(); err != nil || st.ExitCode() != 0 {
			return fmt.Errorf("%q: %v, %v", argv, st, err)
		}
	}
	after := childProcesses()
	fmt.Printf("stubs before=%d after=%d\n", before, after)
	return nil
}

// childProcesses counts this process's live descendants: the platform's
// stubs.
func childProcesses() int {
	n := 0
	for _, pid := range proctree.Descendants(os.Getpid()) {
		if processAlive(pid) {
			n++
		}
	}
	return n
}

// runHold boots a locked sandbox with some processes, reports its pid,
// and blocks until killed.
func runHold() error {
	img, err := openImage()
	if err != nil {
		return err
	}
	s, err := New(Config{Image: img})
	img.Close()
	if err != nil {
		return err
	}
	if _, err := s.StartIdle(); err != nil {
		return err
	}
	for range 3 {
		if _, err := s.Exec(context.Background(), ProcessSpec{Argv: []string{"sleep", "1000000"}}); err != nil {
			return err
		}
	}
	fmt.Printf("holding pid=%d\n", os.Getpid())
	select {}
}

// helperCmd prepares the test binary to run in mode.
func helperCmd(t *testing.T, mode string, args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, imageEnv+"="+imagePath)
	return cmd
}

// readLine reads a line or fails after a minute.
func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		l, _ := r.ReadString('\n')
		ch <- l
	}()
	select {
	case l := <-ch:
		return l
	case <-time.After(time.Minute):
		t.Fatal("helper said nothing for a minute")
		return ""
	}
}

// loopbackRoundTrip is a guest script that sends msg over a TCP connection on
// the sandbox's loopback and prints what the listener received. It retries the
// connect until the listener is up and waits for the listener to exit, rather
// than sleeping a fixed time, so a loaded host cannot make it print nothing;
// after 100 refused connects it says so instead. The listener's stdin is a
// FIFO the shell holds open: busybox nc ends when its stdin ends, and with a
// background job's /dev/null it sometimes ended before the message came (2-4
// runs in 60 printed nothing).
func loopbackRoundTrip(msg string) string {
	return `rm -f /tmp/nc-in; mkfifo /tmp/nc-in; nc -l -p 9000 </tmp/nc-in > /tmp/got & l=$!; exec 3>/tmp/nc-in; n=0
until echo ` + msg + ` | nc 127.0.0.1 9000 2>/dev/null; do
  n=$((n+1)); [ $n -lt 100 ] || { echo listener never came up; kill $l; break; }; sleep 0.05
done
wait $l; cat /tmp/got`
}
