package sentry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/errors/linuxerr"
)

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		want   ExitStatus
		code   int
	}{
		{"true", "exit 0", ExitStatus{}, 0},
		{"false", "exit 1", ExitStatus{Code: 1}, 1},
		{"code 42", "exit 42", ExitStatus{Code: 42}, 42},
		{"SIGKILL", "kill -9 $$", ExitStatus{Signal: syscall.SIGKILL}, 137},
		{"SIGTERM", "kill -TERM $$", ExitStatus{Signal: syscall.SIGTERM}, 143},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t, Config{})
			r := startAndWait(t, s, sh(tc.script))
			if r.status != tc.want || r.status.ExitCode() != tc.code {
				t.Fatalf("%q: got %v (exit code %d), want %v (exit code %d); stderr %q", tc.script, r.status, r.status.ExitCode(), tc.want, tc.code, r.stderr)
			}
		})
	}
}

func TestEnvCwdUser(t *testing.T) {
	s := newSandbox(t, Config{})
	r := startAndWait(t, s, ProcessSpec{
		Argv:      []string{"/bin/sh", "-c", `echo "$GREETING|$PWD|$(pwd)|$(id -u):$(id -g):$(id -G)|$HOME|$PATH"`},
		Env:       []string{"GREETING=hi there"},
		Cwd:       "/home/user",
		UID:       1000,
		GID:       1000,
		ExtraGIDs: []uint32{65534},
	})
	want := "hi there|/home/user|/home/user|1000:1000:1000 65534|/home/user|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
	if r.status.ExitCode() != 0 || r.stdout != want {
		t.Fatalf("got %v stdout %q stderr %q, want %q", r.status, r.stdout, r.stderr, want)
	}
}

func TestStartCreatesMissingCwd(t *testing.T) {
	s := newSandbox(t, Config{})
	r := startAndWait(t, s, ProcessSpec{Argv: []string{"pwd"}, Cwd: "/srv/app/data"})
	if r.status.ExitCode() != 0 || r.stdout != "/srv/app/data\n" {
		t.Fatalf("got %v %q %q", r.status, r.stdout, r.stderr)
	}
}

func TestNonRootHasNoCapabilities(t *testing.T) {
	s := newSandbox(t, Config{})
	startIdle(t, s)
	r := execAndWait(t, s, ProcessSpec{Argv: []string{"/bin/sh", "-c", "grep Cap /proc/self/status"}, UID: 1000, GID: 1000})
	for _, l := range lines(r.stdout) {
		if strings.HasPrefix(l, "CapBnd") {
			continue
		}
		if !strings.HasSuffix(l, "0000000000000000") {
			t.Errorf("uid 1000 has %q, want no capabilities", l)
		}
	}
	r = execAndWait(t, s, ProcessSpec{Argv: []string{"/bin/sh", "-c", "grep CapEff /proc/self/status"}})
	if strings.HasSuffix(strings.TrimSpace(r.stdout), "0000000000000000") {
		t.Errorf("root has %q, want capabilities", r.stdout)
	}
}

func TestStdinPipe(t *testing.T) {
	s := newSandbox(t, Config{})
	input := strings.Repeat("line of input\n", 20000) // more than a pipe holds
	r := startAndWait(t, s, ProcessSpec{Argv: []string{"/bin/sh", "-c", "wc -l; echo done >&2"}, Stdin: strings.NewReader(input)})
	if r.status.ExitCode() != 0 || strings.TrimSpace(r.stdout) != "20000" || r.stderr != "done\n" {
		t.Fatalf("got %v stdout %q stderr %q", r.status, r.stdout, r.stderr)
	}
}

func TestStdinUnreadInput(t *testing.T) {
	// The guest exits without reading; the relay must not block Wait.
	s := newSandbox(t, Config{})
	r := startAndWait(t, s, ProcessSpec{Argv: []string{"true"}, Stdin: io.LimitReader(zeroReader{}, 1<<30)})
	if r.status.ExitCode() != 0 {
		t.Fatalf("got %v", r.status)
	}
}

type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

func TestStdioHostFiles(t *testing.T) {
	s := newSandbox(t, Config{})
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inR.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	p, err := s.Start(ProcessSpec{Argv: []string{"/bin/sh", "-c", "read x; echo got $x; echo err >&2"}, Stdin: inR, Stdout: outW, Stderr: outW})
	if err != nil {
		t.Fatal(err)
	}
	// The guest holds its own duplicates; ours must not keep the pipes open.
	outW.Close()
	io.WriteString(inW, "ping\n")
	inW.Close()
	got, err := io.ReadAll(outR)
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait()
	if err != nil || st.ExitCode() != 0 {
		t.Fatalf("Wait: %v %v", st, err)
	}
	if string(got) != "got ping\nerr\n" {
		t.Fatalf("host pipe got %q", got)
	}
}

// TestStartCwdNotADirectory: a Cwd that cannot be made a directory is a
// *WorkingDirError carrying the path and the cause, so that a caller can
// name the flag it came from.
func TestStartCwdNotADirectory(t *testing.T) {
	s := newSandbox(t, Config{})
	for _, cwd := range []string{"/etc/passwd", "/etc/passwd/sub"} {
		_, err := s.Start(ProcessSpec{Argv: []string{"true"}, Cwd: cwd})
		var wde *WorkingDirError
		if !errors.As(err, &wde) || wde.Path != cwd || !errors.Is(err, linuxerr.ENOTDIR) {
			t.Errorf("Start with Cwd %s: %v, want a *WorkingDirError for it wrapping ENOTDIR", cwd, err)
		}
	}
	// The sandbox stays usable.
	if r := startAndWait(t, s, ProcessSpec{Argv: []string{"echo", "ok"}}); r.stdout != "ok\n" {
		t.Fatalf("got %q", r.stdout)
	}
}

func TestCommandNotFound(t *testing.T) {
	s := newSandbox(t, Config{})
	if _, err := s.Start(ProcessSpec{Argv: []string{"no-such-program"}}); err == nil {
		t.Fatal("Start of a missing program succeeded")
	}
	// The sandbox stays usable.
	r := startAndWait(t, s, ProcessSpec{Argv: []string{"echo", "ok"}})
	if r.stdout != "ok\n" {
		t.Fatalf("got %q", r.stdout)
	}
}

func TestBadSpecs(t *testing.T) {
	s := newSandbox(t, Config{})
	for _, spec := range []ProcessSpec{
		{},
		{Argv: []string{""}},
		{Argv: []string{"true"}, Cwd: "relative"},
		{Argv: []string{"true"}, Env: []string{"NOEQUALS"}},
		{Argv: []string{"true"}, TTY: true, Stdout: &bytes.Buffer{}},
	} {
		if _, err := s.Start(spec); err == nil {
			t.Errorf("Start(%+v) succeeded", spec)
		}
	}
	if _, err := s.Exec(context.Background(), ProcessSpec{Argv: []string{"true"}}); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Exec before Start: %v, want ErrNotStarted", err)
	}
}

func TestSignalAndWaitDelay(t *testing.T) {
	s := newSandbox(t, Config{})
	startIdle(t, s)
	var out syncBuffer
	p, err := s.Exec(context.Background(), ProcessSpec{
		// The background sleep inherits stdout and keeps the pipe open.
		Argv:      []string{"/bin/sh", "-c", "sleep 1000 & echo started; exec sleep 1000"},
		Stdout:    &out,
		WaitDelay: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the guest to start", func() bool { return out.String() != "" })
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait()
	if err != nil || st.Signal != syscall.SIGTERM {
		t.Fatalf("Wait: %v %v, want SIGTERM", st, err)
	}
	if out.String() != "started\n" {
		t.Errorf("stdout %q", out.String())
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, ErrProcessDone) {
		t.Errorf("Signal after exit: %v, want ErrProcessDone", err)
	}
}

func TestExecContextCancelKills(t *testing.T) {
	s := newSandbox(t, Config{})
	startIdle(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := s.Exec(ctx, ProcessSpec{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	st, err := p.Wait()
	if err != nil || st.Signal != syscall.SIGKILL {
		t.Fatalf("Wait: %v %v, want SIGKILL", st, err)
	}
}

func TestInitExitKillsOthers(t *testing.T) {
	s := newSandbox(t, Config{})
	init, err := s.Start(ProcessSpec{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Exec(context.Background(), ProcessSpec{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	init.Kill()
	if st, _ := init.Wait(); st.Signal != syscall.SIGKILL {
		t.Fatalf("init: %v", st)
	}
	if st, _ := other.Wait(); st.Signal != syscall.SIGKILL {
		t.Fatalf("other: %v", st)
	}
	if _, err := s.Exec(context.Background(), ProcessSpec{Argv: []string{"true"}}); !errors.Is(err, ErrStopped) {
		t.Fatalf("Exec after init exit: %v, want ErrStopped", err)
	}
}

func TestStdoutToRegularFileAppends(t *testing.T) {
	s := newSandbox(t, Config{})
	path := t.TempDir() + "/out"
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("before\n") // the offset is now past it, as after a shell's echo
	in, err := os.Open("/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	p, err := s.Start(ProcessSpec{Argv: []string{"/bin/sh", "-c", "echo guest; wc -c >&2"}, Stdin: in, Stdout: f, Stderr: f})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(); err != nil || st.ExitCode() != 0 {
		t.Fatalf("%v %v", st, err)
	}
	f.WriteString("after\n")
	host, _ := os.ReadFile("/etc/hostname")
	got, _ := os.ReadFile(path)
	if want := fmt.Sprintf("before\nguest\n%d\nafter\n", len(host)); string(got) != want {
		t.Fatalf("file has %q, want %q", got, want)
	}
}

func TestSignalDescendantsSparesTheShell(t *testing.T) {
	s := newSandbox(t, Config{})
	startIdle(t, s)
	stdin, input := io.Pipe()
	defer input.Close()
	var out syncBuffer
	// A shell that reads its commands from stdin, as a harness's
	// persistent session does; the sleep is the job ^C interrupts.
	p, err := s.Exec(context.Background(), ProcessSpec{Argv: []string{"/bin/sh"}, Stdin: stdin, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	io.WriteString(input, "cd /tmp; X=kept; echo started; sleep 1000; echo interrupted=$?\n")
	waitFor(t, "the job to start", func() bool { return strings.Contains(out.String(), "started") })
	waitFor(t, "the job to be interrupted", func() bool {
		// The shell may not have forked the sleep yet: signal again
		// until it shows.
		if err := p.SignalDescendants(syscall.SIGINT); err != nil {
			t.Fatalf("SignalDescendants: %v", err)
		}
		return strings.Contains(out.String(), "interrupted=")
	})
	io.WriteString(input, "echo $X $(pwd)\n")
	input.Close()
	st, err := p.Wait()
	if err != nil || st.ExitCode() != 0 {
		t.Fatalf("the shell: %v %v, want it to survive the interrupt and exit 0", st, err)
	}
	if want := "started\ninterrupted=130\nkept /tmp\n"; out.String() != want {
		t.Errorf("stdout %q, want %q", out.String(), want)
	}
	if err := p.SignalDescendants(syscall.SIGINT); !errors.Is(err, ErrProcessDone) {
		t.Errorf("SignalDescendants after exit: %v, want ErrProcessDone", err)
	}
}
