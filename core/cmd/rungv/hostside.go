package main

import (
	"fmt"
	"io"
	"os"

	"z.gfire.dev/gvx/core/host"
	"z.gfire.dev/gvx/core/internal/exetrim"
	"z.gfire.dev/gvx/core/internal/hostfile"
	"z.gfire.dev/gvx/core/netstack"
	"z.gfire.dev/gvx/core/sentry"
	"z.gfire.dev/gvx/core/spec"
	"z.gfire.dev/gvx/core/store"
)

// hostSide is what rungv opens on the host for a sandbox before it boots:
// once it does, the process is locked down and can open nothing.
type hostSide struct {
	// plan has the open files, network and control endpoint.
	plan host.Plan
	// stdout and stderr are init's; releaseStreams closes rungv's copies
	// of the pipes made for them once the sandbox holds its own.
	stdout, stderr *os.File
	releaseStreams func()
	// closers undo what open did, last first.
	closers []func()
}

// open opens, for sp with cfg and netCfg (planSandbox's), the image's
// root file system, the snapshot to restore, the control endpoint, the
// network and the janitor that removes their sockets, creates missing
// volumes, and makes init's stdout and stderr.
func (h *hostSide) open(f *runOptions, sp *spec.Sandbox, img *store.Image, cfg sentry.Config, netCfg netstack.Config, ctlSpec controlSpec) error {
	var err error
	if f.idleTrim > 0 {
		if h.plan.Trim, err = exetrim.Find(); err != nil {
			return err
		}
		h.plan.IdleTrim = f.idleTrim
	}
	erofsFile, err := os.Open(img.ErofsPath())
	if err != nil {
		return fmt.Errorf("opening the image's root filesystem: %w (try `rungv rmi %s` and pull again)", err, img.ShortID())
	}
	h.onClose(func() { erofsFile.Close() })
	if sp.Restore != "" {
		snapshot, err := hostfile.Open(sp.Restore, os.O_RDONLY, hostfile.Regular)
		if err != nil {
			return &fieldError{"restore", "", err.Error(), err}
		}
		h.onClose(func() { snapshot.Close() })
		h.plan.Snapshot = snapshot
	}
	ctl, err := openControl(ctlSpec)
	if err != nil {
		return err
	}
	h.onClose(ctl.close)
	h.plan.Control = ctl.Control
	netCfg.Logf = debugLogf(f.debug)
	nw, err := netstack.New(netCfg)
	if err != nil {
		return err
	}
	h.onClose(func() { nw.Close() })
	h.plan.Network = nw
	if !f.quiet {
		announceChosenPorts(os.Stderr, netCfg.Publish, nw.Published())
	}
	janitor, err := startJanitorFor(ctl, nw)
	if err != nil {
		return err
	}
	// The janitor removes the sockets once rungv is gone.
	h.onClose(func() { janitor.Close() })
	cfg.Image = erofsFile
	var created io.Writer = os.Stderr
	if f.quiet {
		created = nil
	}
	if err := createMissingVolumes(cfg.Volumes, created); err != nil {
		return err
	}
	cfg.Lockdown.TrapViolations = f.trapSeccomp
	if f.debug {
		cfg.LogWriter, cfg.Debug = os.Stderr, true
	}
	cfg.VolumeErrors = prefixWriter{w: os.Stderr, prefix: "rungv: "}
	h.plan.Config = cfg
	var outs outputPipes
	if h.stdout, h.stderr, h.releaseStreams, err = outs.initStreams(); err != nil {
		return err
	}
	// Undone after the sandbox's Close, in host.Run: the copies to
	// regular files end once the sandbox and rungv let go of the pipes.
	// rungv's copies go first, or a start that fails before init holds
	// them would wait out the timeout.
	h.onClose(func() {
		h.releaseStreams()
		outs.wait(outputDrainTimeout)
	})
	if sp.Restore != "" {
		h.plan.RestoreStdio = sentry.RestoreStdio{Stdout: h.stdout, Stderr: h.stderr}
		if f.interactive {
			h.plan.RestoreStdio.Stdin = os.Stdin
		}
	}
	return nil
}

func (h *hostSide) onClose(f func()) { h.closers = append(h.closers, f) }

// close undoes open, last first.
func (h *hostSide) close() {
	for i := len(h.closers) - 1; i >= 0; i-- {
		h.closers[i]()
	}
}

// announceChosenPorts writes the host ports the host chose (-p GUESTPORT,
// -p IP::GUESTPORT) to w, as the caller cannot know them otherwise:
// requested are the ports as -p gave them, published as bound, in order.
func announceChosenPorts(w io.Writer, requested, published []netstack.Publish) {
	for i, p := range published {
		if i < len(requested) && requested[i].HostPath == "" && requested[i].HostAddr.Port() == 0 {
			fmt.Fprintf(w, "rungv: published %s -> %d/%s\n", p.HostAddr, p.GuestPort, p.Protocol)
		}
	}
}

// debugLogf reports the network's refused flows and relay errors on
// stderr with --debug, and nowhere otherwise: stderr is the guest
// command's too.
func debugLogf(debug bool) func(string, ...any) {
	if !debug {
		return nil
	}
	return logf
}

// prefixWriter writes each Write, a line, after prefix.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

// Write implements io.Writer.
func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}
