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
	s   *Sandbox
	tg  *kernel.ThreadGroup
	pid kernel.ThreadID
	// session is the session the process leads: a process the sandbox
	// creates has no parent, so the kernel makes it a session leader, and
	// everything it starts stays in that session unless it calls setsid.
	session   *kernel.Session
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
		session:   tg.Session(),
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

// maxSignalPasses bounds SignalGroup's passes over the process table. With
// SIGKILL the passes end by themselves (a killed task cannot fork); a
// process that forks faster than it is signalled with a signal it handles
// must not keep the caller here for ever.
const maxSignalPasses = 64

// SignalGroup sends sig to the process and to everything it started: every
// process of its session, and every process below it in the process tree
// (which covers a child that left the session with setsid while its parent
// still lives). It is what timeout(1) and a terminal's Ctrl-C do for a
// command that is a shell running other programs: signalling the shell
// alone would leave its children running. It works after the process
// itself has exited, for the children it left behind.
//
// A process that both left the session and lost its parent (a daemon that
// double-forked and called setsid) is no longer the command's, and is not
// signalled.
func (p *Process) SignalGroup(sig syscall.Signal) error {
	if sig <= 0 || sig > linux.SignalMaximum {
		return fmt.Errorf("sentry: invalid signal %d", int(sig))
	}
	if p.signalStarted(sig, true) == 0 {
		return ErrProcessDone
	}
	return nil
}

// SignalDescendants sends sig to what the process started, as SignalGroup
// does, but not to the process itself: what a terminal's Ctrl-C does to
// the job a shell is running, which the shell survives. A shell that
// reads commands from its stdin keeps its state (working directory,
// variables) across an interrupted command. It returns ErrProcessDone
// once the process has exited, and nil if it has started nothing.
func (p *Process) SignalDescendants(sig syscall.Signal) error {
	if sig <= 0 || sig > linux.SignalMaximum {
		return fmt.Errorf("sentry: invalid signal %d", int(sig))
	}
	select {
	case <-p.exited:
		return ErrProcessDone
	default:
	}
	p.signalStarted(sig, false)
	return nil
}

// signalStarted sends sig to every process p started, and to p itself if
// self is set, and returns how many it signalled.
func (p *Process) signalStarted(sig syscall.Signal, self bool) int {
	// A process may fork between one pass's look at the process table and
	// its signal; the next pass finds the child. Once signalled with
	// SIGKILL, a task cannot create another.
	signalled := map[*kernel.ThreadGroup]struct{}{}
	if !self {
		signalled[p.tg] = struct{}{}
	}
	skipped := len(signalled)
	var tgs []*kernel.ThreadGroup
	for pass := 0; pass < maxSignalPasses; pass++ {
		found := false
		tgs = p.s.k.RootPIDNamespace().ThreadGroupsAppend(tgs[:0])
		for _, tg := range tgs {
			if _, done := signalled[tg]; done || !p.started(tg) {
				continue
			}
			signalled[tg] = struct{}{}
			found = true
			// A process that exited meanwhile is no error: it has ended.
			p.s.k.SendExternalSignalThreadGroup(tg, &linux.SignalInfo{Signo: int32(sig)})
		}
		if !found {
			break
		}
	}
	return len(signalled) - skipped
}

// started reports whether tg is the process or one it started: in its
// session, or its descendant.
func (p *Process) started(tg *kernel.ThreadGroup) bool {
	if tg == p.tg || tg.Session() == p.session {
		return true
	}
	for t := tg.Leader(); t != nil; t = t.Parent() {
		if t.ThreadGroup() == p.tg {
			return true
		}
	}
	return false
}

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
