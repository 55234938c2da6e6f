package sentry

import (
	"context"
	"syscall"

	"gvisor.dev/gvisor/pkg/abi/linux"
)

// Shutdown stops the sandbox gracefully: it sends SIGTERM to init and waits
// for init to exit until ctx is done, then kills every guest process and
// releases the kernel. The returned error is ctx's if the deadline forced the
// kill, else Close's. After Shutdown the process may host a new Sandbox.
func (s *Sandbox) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	p := s.init
	st := s.state
	s.mu.Unlock()
	if st == stateClosed {
		return nil
	}
	var err error
	if p != nil {
		if sigErr := p.Signal(syscall.SIGTERM); sigErr == nil {
			select {
			case <-p.exited:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}

// Close kills every guest process at once, writes back and closes the
// volumes, and releases the kernel and the process-wide claim. It returns
// the volumes' close errors (their images then keep their last committed
// state). It is idempotent: later calls wait for the first to finish and
// return its outcome.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	if s.state == stateClosed {
		s.mu.Unlock()
		<-s.closed
		return s.closeErr
	}
	started := s.state == stateRunning
	s.state = stateClosed
	procs := make([]*Process, 0, len(s.procs))
	for p := range s.procs {
		procs = append(procs, p)
	}
	files := make([]*File, 0, len(s.files))
	for f := range s.files {
		files = append(files, f)
	}
	s.files = nil
	s.mu.Unlock()

	s.users.Wait()
	for _, f := range files {
		f.close()
	}

	ctx := s.k.SupervisorContext()
	if started {
		close(s.killed)
		s.k.Kill(linux.WaitStatusTerminationSignal(linux.SIGKILL))
		s.k.WaitExited()
		for _, p := range procs {
			<-p.done
		}
	}
	if s.oom != nil {
		s.oom.stop()
	}
	// No guest task runs now: flush and close the volumes before the
	// kernel (and the memory file holding mapped pages) goes away.
	s.closeErr = closeVolumes(ctx, s.volumes)
	clearPidsLimit(s.k)
	s.mns.DecRef(ctx)
	s.k.Release()
	releaseProcess(s)
	close(s.closed)
	return s.closeErr
}
