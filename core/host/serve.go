package host

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/netstack"
	"z.gfire.dev/gvx/core/sentry"
)

// serve builds the sandbox's Backend, runs a restored image's snapshot
// hook, and serves control requests on p.Control until the returned
// function is called.
func (r *running) serve(ctx context.Context, p *Plan, h Hooks) (stop func(), err error) {
	r.stopper = &stopper{sb: r.sb, init: r.init, grace: p.StopTimeout}
	info := p.Info
	info.PID = os.Getpid()
	info.Hostname = p.Config.Hostname
	info.Platform = string(p.Config.Platform)
	info.Spinning = p.Config.Platform == sentry.PlatformSystrap && !p.Config.NoSpinning
	if p.Network != nil {
		info.Ports = publishedPorts(p.Network.Published())
	}
	var network Network
	if p.Network != nil {
		network = p.Network
	}
	r.backend = New(Config{
		Sandbox:      r.sb,
		Defaults:     p.Defaults,
		Stop:         r.stopper.stop,
		SnapshotHook: p.SnapshotHook,
		Network:      network,
		Info:         info,
	})
	if p.Snapshot != nil {
		if err := r.backend.RestoreHook(ctx); err != nil {
			return nil, err
		}
		if p.Network != nil {
			p.Network.Resume()
		}
	}
	if h.Ready != nil {
		h.Ready()
	}
	r.srv = control.NewServer(r.backend)
	r.srv.Logf = h.Logf
	stopTrim := func() {}
	if p.IdleTrim > 0 && p.Trim != nil {
		// Start-up touched most of the binary; an idle sandbox needs
		// little of it.
		trimmer := p.Trim.TrimWhenQuiet(p.IdleTrim)
		stopTrim = trimmer.Stop
		r.srv.Track = trimmer.Track
	}
	serveCtx, stopServing := context.WithCancel(context.Background())
	p.Control.serve(serveCtx, r.srv, h, func() {
		// The program that owned the control connection is gone:
		// nothing may outlive it.
		r.stopper.stop(0)
	})
	return func() {
		stopServing()
		stopTrim()
	}, nil
}

// wait passes the host's signals on to init, and stops the sandbox at its
// timeout, until init ends.
func (r *running) wait(p *Plan, sigs <-chan os.Signal, h Hooks) {
	var timeout <-chan time.Time
	if p.Timeout > 0 {
		timeout = time.After(p.Timeout)
	}
	for {
		select {
		case <-r.init.Done():
			return
		case sig := <-sigs:
			// A stop follows for the signals that end things, so a
			// guest that ignores them still goes.
			s := sig.(syscall.Signal)
			if p.Control.Conn != nil {
				// Started by a program, which keeps stderr's tail for
				// its errors: a sandbox that ends this way says so. A
				// person at a terminal pressed the key and knows.
				h.Logf("received %v; passed it to the sandbox's init", unix.SignalName(s))
			}
			r.init.Signal(s)
			if s != syscall.SIGHUP {
				r.stopper.deadline()
			}
		case <-timeout:
			if h.TimedOut != nil {
				h.TimedOut()
			}
			r.stopper.stop(p.StopTimeout)
		}
	}
}

// stop closes the sandbox whose init ended and answers the control
// request that ended it, if any.
func (r *running) stop(p *Plan, h Hooks, stopServing func()) Exit {
	st, err := r.init.Wait()
	if p.Network != nil {
		p.Network.Drain(publishedDrainTimeout)
	}
	closeErr := r.sb.Close()
	if closeErr != nil {
		h.Logf("%v", closeErr)
	}
	// The request that ended the sandbox (a checkpoint that stops it, a
	// shutdown) still gets its answer, and the client that started it
	// its handshake.
	r.srv.WaitAnswered(answerDrainTimeout)
	stopServing()
	return Exit{Status: st, Err: err, Checkpointed: r.backend.Checkpointed(), CloseErr: closeErr}
}

// publishedPorts returns the published ports as bound, for Info.
func publishedPorts(published []netstack.Publish) []control.PublishedPort {
	var out []control.PublishedPort
	for _, p := range published {
		pp := control.PublishedPort{HostPath: p.HostPath, GuestPort: p.GuestPort, Protocol: "tcp"}
		if p.Protocol == netstack.UDP {
			pp.Protocol = "udp"
		}
		if p.HostPath == "" {
			pp.HostIP, pp.HostPort = p.HostAddr.Addr().String(), p.HostAddr.Port()
		}
		out = append(out, pp)
	}
	return out
}

// stopper stops a sandbox once: SIGTERM to init, then after the grace
// period everything is killed.
type stopper struct {
	sb    *sentry.Sandbox
	init  *sentry.Process
	grace time.Duration
	once  sync.Once
}

// stop sends SIGTERM to init and kills everything after grace.
func (s *stopper) stop(grace time.Duration) {
	s.init.Signal(syscall.SIGTERM)
	s.killAfter(grace)
}

// deadline kills everything after the default grace period unless init
// exits first.
func (s *stopper) deadline() { s.killAfter(s.grace) }

func (s *stopper) killAfter(grace time.Duration) {
	s.once.Do(func() {
		go func() {
			select {
			case <-s.init.Done():
			case <-time.After(grace):
				s.sb.Close()
			}
		}()
	})
}

// listenFD is the listening socket's descriptor for the lockdown rules,
// or 0.
func (c Control) listenFD() int {
	if c.Listener == nil {
		return 0
	}
	sc, err := c.Listener.SyscallConn()
	if err != nil {
		return 0
	}
	fd := 0
	sc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// serve starts serving in the background. For an inherited connection,
// gone is called when the peer closes it.
func (c Control) serve(ctx context.Context, srv *control.Server, h Hooks, gone func()) {
	switch {
	case c.Listener != nil:
		go srv.Serve(ctx, c.Listener)
	case c.Conn != nil:
		srv.ServeConnAsync(ctx, c.Conn, func(err error) {
			if ctx.Err() != nil {
				return // the sandbox ended first
			}
			// Said where the caller keeps the tail for its errors, so
			// that a sandbox ended this way says why.
			if err == nil || errors.Is(err, io.EOF) {
				h.Logf("the caller closed the control connection without a shutdown (its process ended, or its end of the connection was closed); stopping the sandbox")
			} else {
				h.Logf("control connection: %v; stopping the sandbox", err)
			}
			gone()
		})
	}
}
