package sentry

import (
	"bufio"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/ptytest"
)

// openPTY returns a new host pseudo-terminal pair with a 24x80 window.
func openPTY(t *testing.T) (master, replica *os.File) {
	t.Helper()
	master, replica, err := ptytest.Open()
	if err != nil {
		t.Skipf("no host pseudo-terminals (/dev/ptmx): %v", err)
	}
	t.Cleanup(func() { master.Close(); replica.Close() })
	return master, replica
}

// expect reads from r until it has seen want, or fails after a minute.
func expect(t *testing.T, r *bufio.Reader, want string) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		var sb strings.Builder
		for !strings.Contains(sb.String(), want) {
			b, err := r.ReadByte()
			if err != nil {
				break
			}
			sb.WriteByte(b)
		}
		got <- sb.String()
	}()
	select {
	case s := <-got:
		if !strings.Contains(s, want) {
			t.Fatalf("terminal output %q lacks %q", s, want)
		}
		return s
	case <-time.After(time.Minute):
		t.Fatalf("terminal output never showed %q", want)
		return ""
	}
}

func TestTTY(t *testing.T) {
	master, replica := openPTY(t)
	s := newSandbox(t, Config{})
	p, err := s.Start(ProcessSpec{
		Argv:   []string{"/bin/sh", "-c", `test -t 0 && test -t 1 && test -t 2 && echo all-ttys; stty size; read x; echo "got $x"; exec sleep 1000`},
		Stdin:  replica,
		Stdout: replica,
		Stderr: replica,
		TTY:    true,
	})
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(master)
	expect(t, out, "all-ttys\r\n24 80\r\n")
	master.WriteString("hello\n")
	// The terminal echoes the input, then the guest answers.
	expect(t, out, "got hello\r\n")

	// ^C as the host process would forward it.
	if err := p.SignalForeground(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait()
	if err != nil || st.ExitCode() != 130 {
		t.Fatalf("after SIGINT: %v %v, want exit code 130", st, err)
	}
}

func TestTTYNeedsATerminal(t *testing.T) {
	s := newSandbox(t, Config{})
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := s.Start(ProcessSpec{Argv: []string{"true"}, Stdin: r, Stdout: w, Stderr: w, TTY: true}); err == nil {
		t.Fatal("Start with a TTY on a pipe succeeded")
	}
	p := startIdle(t, s)
	if err := p.SignalForeground(syscall.SIGINT); err != ErrNoTTY {
		t.Fatalf("SignalForeground without a TTY: %v, want ErrNoTTY", err)
	}
}
