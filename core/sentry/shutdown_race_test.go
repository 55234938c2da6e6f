package sentry

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestOpenRacingCloseFailsCleanly opens files from several goroutines
// while the sandbox closes: each Open succeeds or returns ErrClosed, and
// none may take the process down.
func TestOpenRacingCloseFailsCleanly(t *testing.T) {
	for round := 0; round < 5; round++ {
		s := newSandbox(t, Config{})
		if _, err := s.StartIdle(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		opened := make(chan struct{}, 8)
		errs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					f, err := s.Open(context.Background(), "/etc/passwd")
					if err != nil {
						errs <- err
						return
					}
					f.Close()
					select {
					case opened <- struct{}{}:
					default:
					}
				}
			}()
		}
		// Close while the openers are busy, once each has had a turn.
		for i := 0; i < 8; i++ {
			<-opened
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("round %d: Open during Close: %v; want ErrClosed", round, err)
			}
		}
	}
}

// TestExecAsInitExitsSaysStopped execs while init exits on SIGTERM: an
// exec the kernel refuses because init is exiting reports ErrStopped, not
// the ENOMEM the kernel gives, which reads as a sandbox out of memory.
func TestExecAsInitExitsSaysStopped(t *testing.T) {
	s := newSandbox(t, Config{})
	init, err := s.StartIdle()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			p, err := s.Exec(context.Background(), ProcessSpec{Argv: []string{"true"}})
			if err != nil {
				done <- err
				return
			}
			p.Wait()
		}
	}()
	// Let execs run before init goes.
	if r := execAndWait(t, s, ProcessSpec{Argv: []string{"true"}}); r.status.ExitCode() != 0 {
		t.Fatalf("exec: %v %q", r.status, r.stderr)
	}
	if err := init.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("execs still succeed 60 s after init's SIGTERM")
	}
	if !errors.Is(err, ErrStopped) {
		t.Errorf("exec as init exits: %v; want ErrStopped", err)
	}
}
