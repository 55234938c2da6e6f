// Package host is the sandbox host as a library: the part of a process
// that owns one running Sentry sandbox (core/sentry) and serves it to its
// clients over the control protocol (core/control). A Backend answers
// their requests — execs, files, stats, signals, checkpoints — against
// the sandbox, resolving users against the guest's own /etc/passwd and
// /etc/group as docker exec does.
//
// Run is the life of such a process's sandbox, in steps: boot it (or
// continue a snapshot) and start its init, serve control requests with a
// Backend, pass the process's signals on and stop it at its timeout, and
// once init has ended close it and answer the request that ended it.
// rungv is one such process: it parses flags, opens what the sandbox needs
// on the host, calls Run and reports how the sandbox ended. Everything
// here that needs the Sentry's internals (its error values, its $PATH
// lookup) stays in this package, so that the command itself deals only in
// core's packages.
package host

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"time"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/netstack"
	"z.gfire.dev/gvx/core/sentry"
)

// Config is what a Backend needs from the process that booted the sandbox.
type Config struct {
	// Sandbox is the running sandbox; it is required.
	Sandbox *sentry.Sandbox
	// Info is what the Info request answers.
	Info control.SandboxInfo
	// Defaults are the image's environment, working directory and user,
	// as adjusted by the host's flags, for execs that do not set them.
	Defaults Defaults
	// Stop asks the host to shut the sandbox down gracefully, within
	// grace; it is required.
	Stop func(grace time.Duration)
	// SnapshotHook is the image's snapshot hook, or "" (see
	// image.SnapshotHookLabel).
	SnapshotHook string
	// Network is the sandbox's host-side network, suspended while a
	// checkpoint is taken, or nil for none.
	Network Network
}

// Defaults are what an exec that does not say otherwise gets.
type Defaults struct {
	Env  []string // KEY=VALUE; an exec's own entries override these
	Cwd  string   // "" for the root directory
	User string   // name|uid[:group|gid]; "" for root
}

// Network is the host side of a sandbox's network, as a checkpoint needs
// it. *netstack.Network implements Network.
type Network interface {
	// Mode is the network's mode: a NAT sandbox can only be
	// checkpointed with Stop.
	Mode() netstack.Mode
	// Suspend closes the relays of published ports and the NAT, which
	// wait on guest sockets that cannot be saved; Resume reopens them.
	Suspend()
	Resume()
}

var _ Network = (*netstack.Network)(nil)

// Backend serves the control protocol from a running sentry sandbox.
type Backend struct {
	sb           *sentry.Sandbox
	info         control.SandboxInfo
	defaults     Defaults
	stop         func(grace time.Duration)
	snapshotHook string
	network      Network
	// stoppedBySnapshot is set once a checkpoint ended the sandbox.
	stoppedBySnapshot atomic.Bool
}

var _ control.Backend = (*Backend)(nil)

// New returns a Backend for c.Sandbox. Serve it with control.NewServer.
func New(c Config) *Backend {
	return &Backend{
		sb:           c.Sandbox,
		info:         c.Info,
		defaults:     c.Defaults,
		stop:         c.Stop,
		snapshotHook: c.SnapshotHook,
		network:      c.Network,
	}
}

// Info implements control.Backend.Info.
func (b *Backend) Info() control.SandboxInfo { return b.info }

// SignalInit implements control.Backend.SignalInit.
func (b *Backend) SignalInit(sig int) error {
	init := b.sb.Init()
	if init == nil {
		return control.Errorf(control.CodeUnavailable, "the sandbox has no init process")
	}
	err := init.Signal(syscall.Signal(sig))
	if errors.Is(err, sentry.ErrProcessDone) {
		return nil
	}
	return err
}

// Wait implements control.Backend.Wait.
func (b *Backend) Wait(ctx context.Context) (control.WaitResult, error) {
	init := b.sb.Init()
	if init == nil {
		return control.WaitResult{}, control.Errorf(control.CodeUnavailable, "the sandbox has no init process")
	}
	select {
	case <-init.Done():
	case <-ctx.Done():
		return control.WaitResult{}, ctx.Err()
	}
	st, err := init.Wait()
	return control.WaitResult{ExitCode: st.ExitCode(), Signal: int(st.Signal)}, err
}

// Stats implements control.Backend.Stats.
func (b *Backend) Stats(ctx context.Context) (control.Stats, error) {
	st, err := b.sb.Stats()
	if err != nil {
		return control.Stats{}, err
	}
	return control.Stats{MemoryUsage: st.MemoryUsage, MemoryLimit: st.MemoryLimit, OOMKills: st.OOMKills, Tasks: st.Tasks, PidsLimit: st.PidsLimit}, nil
}

// Shutdown implements control.Backend.Shutdown.
func (b *Backend) Shutdown(ctx context.Context, grace time.Duration) error {
	b.stop(grace)
	return nil
}

// SandboxError maps the Sentry's errors about the sandbox's state to
// protocol errors, and returns other errors as they are.
func SandboxError(err error) error {
	switch {
	case errors.Is(err, sentry.ErrStopped), errors.Is(err, sentry.ErrClosed):
		return control.Errorf(control.CodeUnavailable, "the sandbox is stopping: %v", err)
	case errors.Is(err, sentry.ErrNotStarted):
		return control.Errorf(control.CodeInvalid, "%v", err)
	}
	return err
}
