package sentry

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
)

// ErrProcessDone is returned when signalling a process that has exited.
var ErrProcessDone = errors.New("sentry: process already finished")

// Process is a guest process started by Sandbox.Start or Sandbox.Exec.
type Process struct {
	s         *Sandbox
	tg        *kernel.ThreadGroup
	pid       kernel.ThreadID
	stdio     *stdio
	waitDelay time.Duration

	// exited is closed when the thread group has exited; done when, in
	// addition, the output relays have finished and status is set.
	exited chan struct{}
	done   chan struct{}
	status ExitStatus
	err    error
}

func newProcess(s *Sandbox, tg *kernel.ThreadGroup, pid kernel.ThreadID, st *stdio, spec *ProcessSpec) *Process {
	return &Process{
		s:         s,
		tg:        tg,
		pid:       pid,
		stdio:     st,
		waitDelay: spec.WaitDelay,
		exited:    make(chan struct{}),
		done:      make(chan struct{}),
	}
}

// PID returns the process ID in the sandbox's root PID namespace.
func (p *Process) PID() int { return int(p.pid) }

// Done is closed when Wait would return without blocking.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit and for its output to be copied, and
// returns how it ended. The error reports a failure to copy output.
func (p *Process) Wait() (ExitStatus, error) {
	<-p.done
	return p.status, p.err
}

// Signal sends sig to the process (every thread of it, as kill(2) does).
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.exited:
		return ErrProcessDone
	default:
	}
	if sig <= 0 || sig > linux.SignalMaximum {
		return fmt.Errorf("sentry: invalid signal %d", int(sig))
	}
	if err := p.s.k.SendExternalSignalThreadGroup(p.tg, &linux.SignalInfo{Signo: int32(sig)}); err != nil {
		return fmt.Errorf("sentry: signalling process %d: %w", p.pid, err)
	}
	return nil
}

// Kill sends SIGKILL to the process.
func (p *Process) Kill() error { return p.Signal(syscall.SIGKILL) }

// watch runs from creation until the process is done.
func (p *Process) watch() {
	p.tg.WaitExited()
	ws := p.tg.ExitStatus()
	p.status = exitStatusOf(ws)
	if o := p.s.oomKiller(); o != nil && p.status.Signal == syscall.SIGKILL {
		p.status.OOMKilled = o.killed(p.tg)
	}
	close(p.exited)

	if in := p.stdio.input; in != nil {
		in.abort()
	}
	p.err = p.waitOutputs()
	p.s.forget(p)
	close(p.done)
}

// waitOutputs waits for the output relays to reach end of file, at most
// waitDelay if set, then cuts them off.
func (p *Process) waitOutputs() error {
	var timeout <-chan time.Time
	if p.waitDelay > 0 {
		t := time.NewTimer(p.waitDelay)
		defer t.Stop()
		timeout = t.C
	}
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-timeout:
		case <-p.s.killed:
		case <-finished:
			return
		}
		for _, o := range p.stdio.outputs {
			o.abort()
		}
	}()
	var firstErr error
	for _, o := range p.stdio.outputs {
		<-o.done
		if o.err != nil && firstErr == nil {
			firstErr = o.err
		}
	}
	return firstErr
}

// exitStatusOf converts a kernel wait status.
func exitStatusOf(ws linux.WaitStatus) ExitStatus {
	if ws.Signaled() {
		return ExitStatus{Signal: syscall.Signal(ws.TerminationSignal())}
	}
	return ExitStatus{Code: int(ws.ExitStatus())}
}
