package sentry

import (
	"errors"
	"fmt"
	"syscall"

	"gvisor.dev/gvisor/pkg/abi/linux"
)

// ErrNoTTY is returned by SignalForeground for a process without a TTY.
var ErrNoTTY = errors.New("sentry: the process has no TTY")

// SignalForeground sends sig to the foreground process group of the
// process's terminal, as the terminal driver does for ^C (SIGINT), ^\
// (SIGQUIT) and a window resize (SIGWINCH).
//
// With a host terminal the host kernel's line discipline sees ^C but cannot
// signal guest processes: the host process owning the terminal (rungv) gets
// SIGINT and forwards it here. If no foreground group is set yet, the
// process itself is signalled.
func (p *Process) SignalForeground(sig syscall.Signal) error {
	tty := p.stdio.tty
	if tty == nil {
		return ErrNoTTY
	}
	select {
	case <-p.exited:
		return ErrProcessDone
	default:
	}
	info := &linux.SignalInfo{Signo: int32(sig)}
	tg := tty.ThreadGroup()
	if tg == nil {
		tg = p.tg
	}
	pg, err := tg.ForegroundProcessGroup(tty.TTY())
	if err != nil || pg == nil {
		return p.Signal(sig)
	}
	if err := p.s.k.SendExternalSignalProcessGroup(pg, info); err != nil {
		return fmt.Errorf("sentry: signalling the foreground process group: %w", err)
	}
	return nil
}
