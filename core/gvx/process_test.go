package gvx

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/eventually"
	"z.gfire.dev/gvx/core/spec"
)

// lines reads r line by line onto a channel, for a test to wait on.
func lines(r io.Reader) <-chan string {
	ch := make(chan string, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

func nextLine(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatal("the command's output ended")
		}
		return l
	case <-time.After(time.Minute):
		t.Fatal("no line of output within a minute")
	}
	return ""
}

// TestProcessIsAPersistentShell: a shell started with Start keeps its
// working directory and variables across the commands written to its
// stdin, and survives a ^C to the job it runs.
func TestProcessIsAPersistentShell(t *testing.T) {
	sb := newSandbox(t, config())
	ctx := context.Background()
	out, outw := io.Pipe()
	p, err := sb.Start(ctx, []string{"/bin/sh"}, &ExecOptions{Exec: spec.Exec{StderrToStdout: true}, Stdout: outw})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	got := lines(out)
	io.WriteString(p.Stdin(), "cd /tmp && X=kept && echo ready\n")
	if l := nextLine(t, got); l != "ready" {
		t.Fatalf("first line %q, want ready", l)
	}
	io.WriteString(p.Stdin(), "echo sleeping; sleep 1000; echo rc=$?\n")
	if l := nextLine(t, got); l != "sleeping" {
		t.Fatalf("line %q, want sleeping", l)
	}
	var last string
	eventually.Within(t, time.Minute, "the sleep to end at ^C", func() (bool, error) {
		// The shell may not have forked the sleep yet: ^C again until
		// it shows.
		if err := p.SignalDescendants(ctx, syscall.SIGINT); err != nil {
			return false, err
		}
		select {
		case last = <-got:
			return true, nil
		default:
			return false, nil
		}
	})
	if last != "rc=130" {
		t.Fatalf("after ^C: %q, want rc=130", last)
	}
	io.WriteString(p.Stdin(), "echo $X $(pwd) >&2\n")
	if l := nextLine(t, got); l != "kept /tmp" {
		t.Fatalf("the session's state after ^C: %q, want \"kept /tmp\"", l)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := p.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a running shell: %v, want the deadline", err)
	}
	p.Stdin().Close()
	res, err := p.Wait(ctx)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("the shell at end of input: %+v %v, want exit 0", res, err)
	}
	if _, err := io.WriteString(p.Stdin(), "echo late\n"); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("a write after Close: %v, want io.ErrClosedPipe", err)
	}
	if err := p.SignalDescendants(ctx, syscall.SIGINT); !errors.Is(err, ErrProcessDone) {
		t.Errorf("a signal after the end: %v, want ErrProcessDone", err)
	}
}

// TestProcessKillAndCapture: Kill ends a command that reads nothing, a
// writer blocked on its stdin returns, and output is captured when no
// writer is given.
func TestProcessKillAndCapture(t *testing.T) {
	sb := newSandbox(t, config())
	ctx := context.Background()
	p, err := sb.Start(ctx, []string{"/bin/sh", "-c", "echo hello; exec sleep 1000"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		// Far more than the connection and the guest's pipe hold.
		_, err := p.Stdin().Write(make([]byte, 64<<20))
		wrote <- err
	}()
	p.Kill()
	res, err := p.Wait(ctx)
	if err != nil || res.Signal != int(syscall.SIGKILL) {
		t.Fatalf("after Kill: %+v %v, want SIGKILL", res, err)
	}
	select {
	case err := <-wrote:
		if !errors.Is(err, ErrProcessDone) {
			t.Errorf("the write blocked on the killed command: %v, want ErrProcessDone", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a write blocked on the killed command's stdin did not return")
	}
	p, err = sb.Start(ctx, []string{"/bin/sh", "-c", "cat; echo done >&2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(p.Stdin(), "in and out\n")
	p.Stdin().Close()
	res, err = p.Wait(ctx)
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "in and out\n" || string(res.Stderr) != "done\n" {
		t.Fatalf("captured: %+v %v", res, err)
	}
	if _, err := sb.Start(ctx, nil, nil); !IsCode(err, CodeInvalid) || !strings.Contains(err.Error(), "argv") {
		t.Errorf("no argv: %v, want an invalid-argument error naming argv", err)
	}
}
