package sentry

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/sentry/internal/busyboxroot"
)

// passwdUID is a user the tests' long /etc/passwd does not name: an exec
// as it without HOME reads the whole file to find its home.
const passwdUID = 4242

// writeLongPasswd makes the guest's /etc/passwd the image's followed by
// lines entries of other users. An exec without HOME in its environment
// reads /etc/passwd for the home directory as it creates its process, so
// such an exec as passwdUID takes time proportional to lines before its
// process exists.
func writeLongPasswd(t *testing.T, s *Sandbox, lines int) {
	t.Helper()
	const entry = "u:x:1:1::/:\n"
	r := io.MultiReader(strings.NewReader(busyboxroot.Passwd), &repeatReader{s: entry, n: lines})
	if _, err := s.WriteFileFrom(context.Background(), "/etc/passwd", r, 0o644, nil); err != nil {
		t.Fatalf("writing /etc/passwd: %v", err)
	}
}

// repeatReader reads as s repeated n times.
type repeatReader struct {
	s   string
	n   int
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	total := 0
	for len(p) > 0 && r.n > 0 {
		k := copy(p, r.s[r.off:])
		p, total, r.off = p[k:], total+k, r.off+k
		if r.off == len(r.s) {
			r.off, r.n = 0, r.n-1
		}
	}
	if total == 0 {
		return 0, io.EOF
	}
	return total, nil
}

// TestExecSlowCreationDoesNotHoldOthers: while one exec is slow to create
// its process (here it reads a long /etc/passwd for its user's home),
// other execs start, run and finish. Exec once held the sandbox's lock for
// the whole creation, which every other exec and every process's exit
// need.
func TestExecSlowCreationDoesNotHoldOthers(t *testing.T) {
	s := newSandbox(t, Config{})
	startIdle(t, s)
	writeLongPasswd(t, s, 3<<20)

	slowDone := make(chan struct{})
	var slowTook time.Duration
	var slowErr error
	begun := make(chan struct{})
	go func() {
		defer close(slowDone)
		close(begun)
		start := time.Now()
		p, err := s.Exec(context.Background(), ProcessSpec{Argv: []string{"true"}, UID: passwdUID, GID: passwdUID})
		if err == nil {
			_, err = p.Wait()
		}
		slowTook, slowErr = time.Since(start), err
	}()
	<-begun
	start := time.Now()
	for i := range 3 {
		r := execAndWait(t, s, ProcessSpec{Argv: []string{"true"}, Env: []string{"HOME=/root"}})
		if r.status.ExitCode() != 0 {
			t.Fatalf("true %d: %v %q", i, r.status, r.stderr)
		}
		select {
		case <-slowDone:
			t.Fatalf("true %d finished after the slow exec (%v): it waited for the slow exec's process creation", i, slowTook)
		default:
		}
	}
	fastTook := time.Since(start)
	select {
	case <-slowDone:
	case <-time.After(time.Minute):
		t.Fatal("the slow exec did not finish within a minute")
	}
	if slowErr != nil {
		t.Fatalf("the slow exec: %v", slowErr)
	}
	t.Logf("3 execs of true in %v during one slow exec of %v", fastTook, slowTook)
}

// TestExecRacingClose: execs in flight when Close begins either start, and
// end when Close kills the guest, or fail with ErrClosed having run no
// guest code. None panics, hangs or uses the released kernel. Half the
// execs read a long /etc/passwd, so that Close often begins while they
// create their process.
func TestExecRacingClose(t *testing.T) {
	const rounds, execers = 6, 8
	for round := range rounds {
		s := newSandbox(t, Config{})
		startIdle(t, s)
		writeLongPasswd(t, s, 50000)
		// Every exec says it ran on one host pipe, which the guest
		// writes directly: a line is proof of guest code run.
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()

		var ran atomic.Int32
		var wg sync.WaitGroup
		refused := make([]string, execers) // the exec that failed, per execer
		errs := make([]error, execers)
		for g := range execers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					id := fmt.Sprintf("%d.%d", g, n)
					spec := ProcessSpec{Argv: []string{"/bin/sh", "-c", `echo "ran $ID"`}, Env: []string{"ID=" + id}, Stdout: w, UID: passwdUID, GID: passwdUID}
					if g%2 == 0 {
						spec.Env = append(spec.Env, "HOME=/")
					}
					p, err := s.Exec(context.Background(), spec)
					if err != nil {
						refused[g], errs[g] = id, err
						return
					}
					ran.Add(1)
					select {
					case <-p.Done():
					case <-time.After(time.Minute):
						errs[g] = fmt.Errorf("exec %s did not end within a minute of its start", id)
						return
					}
				}
			}()
		}
		// Past the execers' first processes, which start together, their
		// phases differ: Close finds some creating their process.
		waitFor(t, "the execs to run processes", func() bool { return ran.Load() >= 3*execers })
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		allDone := make(chan struct{})
		go func() { wg.Wait(); close(allDone) }()
		for _, c := range []<-chan struct{}{allDone, chanOf(closed)} {
			select {
			case <-c:
			case <-time.After(time.Minute):
				t.Fatalf("round %d: Close or an exec racing it did not return within a minute", round)
			}
		}
		w.Close()

		r.SetReadDeadline(time.Now().Add(time.Minute))
		out, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("round %d: reading what the execs wrote (the guest should have closed the pipe): %v", round, err)
		}
		said := map[string]bool{}
		for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
			said[strings.TrimPrefix(sc.Text(), "ran ")] = true
		}
		for g, err := range errs {
			switch {
			case !errors.Is(err, ErrClosed):
				t.Errorf("round %d: exec %s: %v, want ErrClosed", round, refused[g], err)
			case said[refused[g]]:
				t.Errorf("round %d: exec %s failed with ErrClosed but ran", round, refused[g])
			}
		}
	}
}

// chanOf returns a channel closed once c has delivered a value.
func chanOf[T any](c <-chan T) <-chan struct{} {
	done := make(chan struct{})
	go func() { <-c; close(done) }()
	return done
}
