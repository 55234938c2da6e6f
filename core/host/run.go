package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/internal/exetrim"
	"z.gfire.dev/gvx/core/netstack"
	"z.gfire.dev/gvx/core/sentry"
)

// Plan is one sandbox for Run: what it is, and everything on the host it
// needs, already open. Once the sandbox boots the process is locked down
// and can open nothing more.
type Plan struct {
	// Config is the Sentry's configuration, with the root image and the
	// volumes' files. Run wires the network and the control socket into
	// its lockdown.
	Config sentry.Config
	// Snapshot, if not nil, is a snapshot to continue instead of starting
	// an init; RestoreStdio is then the restored init's.
	Snapshot     *os.File
	RestoreStdio sentry.RestoreStdio
	// Init is the command to start as init: argv, environment, working
	// directory, stdio, terminal. Its user is Defaults.User, resolved in
	// the guest, which also gives HOME unless Init.Env sets it.
	Init sentry.ProcessSpec
	// KeepAlive starts an idle init instead of Init, for a sandbox that
	// only serves execs.
	KeepAlive bool
	// Copies are host directories copied into the guest before init
	// starts, in order, their files belonging to Defaults.User. A
	// restored sandbox, whose processes are already running, takes none.
	Copies []Copy
	// Defaults are what execs that do not say otherwise get.
	Defaults Defaults
	// Network is the sandbox's host-side network, or nil for none. The
	// caller closes it after Run.
	Network *netstack.Network
	// Control is where clients reach the sandbox. The caller closes it
	// after Run.
	Control Control
	// SnapshotHook is the image's snapshot hook, or "" (see Config).
	SnapshotHook string
	// Info is what the Info request answers; Run fills in the PID, the
	// hostname, the platform, whether it spins and the published ports.
	Info control.SandboxInfo
	// StopTimeout is how long init has to exit after a signal that ends
	// the sandbox, or after Timeout, before everything is killed.
	StopTimeout time.Duration
	// Timeout, if not 0, stops the sandbox once it has run this long.
	Timeout time.Duration
	// Signals are the host process's signals that Run catches once the
	// sandbox serves, until it ends, and passes on to init; a stop
	// follows for all but SIGHUP.
	Signals []os.Signal
	// Trim, if not nil, is unmapped after IdleTrim without a control
	// request (see package exetrim).
	Trim     *exetrim.Ranges
	IdleTrim time.Duration
}

// Control is where clients reach a sandbox's control server: a listening
// unix socket, or one connection inherited from the program that started
// the sandbox, whose end ends the sandbox. The zero Control serves no one.
type Control struct {
	Listener *net.UnixListener
	Conn     net.Conn
}

// Hooks are what Run tells its caller on the way; Logf is required.
type Hooks struct {
	// Logf reports what happens to the sandbox: a signal passed on, a
	// lost control connection, a volume not written back, a warning.
	Logf func(format string, args ...any)
	// Ready, if not nil, is called once init runs and before the first
	// control request is served.
	Ready func()
	// TimedOut, if not nil, is called when Plan.Timeout is reached, just
	// before the sandbox is stopped.
	TimedOut func()
}

// Exit is how a sandbox that ran ended.
type Exit struct {
	// Status is init's exit status; Err is an error in copying its
	// output.
	Status sentry.ExitStatus
	Err    error
	// Checkpointed is set when a checkpoint with Stop ended the sandbox:
	// it succeeded whatever init's status.
	Checkpointed bool
	// CloseErr is why closing the sandbox failed (its volumes are not
	// written back), or nil.
	CloseErr error
}

// Step names the step of Run that failed before the sandbox ran.
type Step string

// The steps of Run that a caller restates in its own terms.
const (
	StepBoot    Step = "boot"    // sentry.New: the volumes, the image
	StepRestore Step = "restore" // sentry.Restore: the snapshot, the volumes
	StepUser    Step = "user"    // resolving Defaults.User in the guest
	StepCopy    Step = "copy"    // Copies: reading a host tree, extracting it in the guest
	StepStart   Step = "start"   // starting init: its command, its working directory
)

// StepError is an error of one step of Run, as the Sentry gave it: the
// caller knows which of its inputs (a field, a flag, a file) was at fault.
type StepError struct {
	Step Step
	Err  error
}

// Error implements error.
func (e *StepError) Error() string { return fmt.Sprintf("%s: %v", e.Step, e.Err) }

// Unwrap returns the Sentry's error.
func (e *StepError) Unwrap() error { return e.Err }

// answerDrainTimeout bounds how long an ending sandbox waits for the
// control requests in progress to be answered.
const answerDrainTimeout = 2 * time.Second

// publishedDrainTimeout bounds how long an exiting sandbox waits for its
// published connections to deliver what the guest wrote before it exited
// (a guest that answered and exited at once, as `nc -e cat` does).
const publishedDrainTimeout = time.Second

// Run runs the sandbox p describes until its init ends, in four steps:
// boot it (or continue its snapshot) and start init; serve control
// requests; pass on signals and stop it on request or at its timeout; and
// once init has ended, close it and answer the request that ended it.
// Its errors before init runs are *StepError where an input was at fault.
//
// A signal of p.Signals that arrives while the sandbox boots reaches init
// once it runs. With p.Signals, a ctx that ended before Run began (the
// caller's own signal context, at a signal that came as the image was
// pulled) counts as SIGTERM.
func Run(ctx context.Context, p Plan, h Hooks) (Exit, error) {
	// Registered before the boot: a signal that comes while the sandbox
	// boots waits here for init, instead of being lost.
	sigs := make(chan os.Signal, 4)
	if len(p.Signals) > 0 { // none would be every signal
		signal.Notify(sigs, p.Signals...)
		defer signal.Stop(sigs)
		if ctx.Err() != nil {
			sigs <- syscall.SIGTERM
		}
	}
	r, err := boot(ctx, &p, h)
	if r != nil {
		defer r.sb.Close()
	}
	if err != nil {
		return Exit{}, err
	}
	stopServing, err := r.serve(ctx, &p, h)
	if err != nil {
		return Exit{}, err
	}
	defer stopServing()
	r.wait(&p, sigs, h)
	return r.stop(&p, h, stopServing), nil
}

// running is a sandbox Run booted.
type running struct {
	sb      *sentry.Sandbox
	init    *sentry.Process
	stopper *stopper
	backend *Backend
	srv     *control.Server
}

// boot boots the sandbox, or restores its snapshot, and starts its init,
// after copying p.Copies in.
// The sandbox it returns, even with an error, is the caller's to close.
func boot(ctx context.Context, p *Plan, h Hooks) (*running, error) {
	cfg := p.Config
	cfg.Lockdown.ControlFD = p.Control.listenFD()
	if p.Network != nil {
		cfg.ConfigureNetwork = p.Network.Attach
		cfg.Lockdown.Net = p.Network.LockdownNet()
	}
	r := &running{}
	var err error
	if p.Snapshot != nil && len(p.Copies) > 0 {
		return nil, &StepError{StepCopy, errors.New("a restored sandbox is already running: copy into it with the SDK instead")}
	}
	if p.Snapshot != nil {
		// Nothing reaches the restored guest before its snapshot hook
		// has run (see serve).
		if p.Network != nil {
			p.Network.Suspend()
		}
		if r.sb, err = sentry.Restore(cfg, p.Snapshot, p.RestoreStdio); err != nil {
			return nil, &StepError{StepRestore, err}
		}
		r.init = r.sb.Init()
	} else if r.sb, err = sentry.New(cfg); err != nil {
		return nil, &StepError{StepBoot, err}
	}
	// Checked before init starts, and after a restore too: execs run as
	// this user unless they name another.
	u, err := ResolveUser(ctx, r.sb, p.Defaults.User)
	if err != nil {
		return r, &StepError{StepUser, err}
	}
	if r.init == nil {
		if err := copyIn(ctx, r.sb, p.Copies, u.owner()); err != nil {
			return r, &StepError{StepCopy, err}
		}
		if r.init, err = startInit(ctx, r.sb, p, u, h); err != nil {
			return r, err
		}
	}
	return r, nil
}

// startInit starts the sandbox's init, p.Init as user u or the idle init
// of a keep-alive sandbox.
func startInit(ctx context.Context, sb *sentry.Sandbox, p *Plan, u User, h Hooks) (*sentry.Process, error) {
	if p.Network != nil {
		prepareGuest(ctx, sb, p.Network, h)
	}
	if p.KeepAlive {
		init, err := sb.StartIdle()
		if err != nil {
			return nil, &StepError{StepStart, err}
		}
		return init, nil
	}
	spec := p.Init
	spec.Env = WithHome(spec.Env, u.Home)
	spec.UID, spec.GID = u.UID, u.GID
	init, err := sb.Start(spec)
	if err != nil {
		return nil, &StepError{StepStart, err}
	}
	return init, nil
}

// prepareGuest gives a NAT sandbox's image the resolver configuration
// the gateway serves (netstack.GuestResolvConf has the rule). It runs
// before init starts; a file it cannot write is reported, not fatal.
func prepareGuest(ctx context.Context, sb *sentry.Sandbox, n *netstack.Network, h Hooks) {
	if n.Mode() != netstack.ModeNAT {
		return
	}
	current, err := sb.ReadFile(ctx, netstack.GuestResolvConfPath)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		h.Logf("warning: reading the image's %s: %v; leaving it alone", netstack.GuestResolvConfPath, err)
		return
	}
	content, write := netstack.GuestResolvConf(current, exists)
	if !write {
		return
	}
	if err := sb.WriteFile(ctx, netstack.GuestResolvConfPath, content, 0o644); err != nil {
		h.Logf("warning: writing %s: %v; DNS in the sandbox needs \"nameserver %s\" there", netstack.GuestResolvConfPath, err, netstack.GatewayAddr)
	}
}
