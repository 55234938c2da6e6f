package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/term"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/host"
	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/sentry"
	"z.gfire.dev/gvx/core/spec"
	"z.gfire.dev/gvx/core/store"
)

// runSandbox implements `rungv run`: it runs the sandbox sp describes, as
// f says. It checks sp and the flags, gets the image, turns on what its
// label says it needs (needsPolicy) and refuses a dockerd that cannot
// start (checkDockerd), opens what the sandbox needs on the host
// (openHost), hands the rest to host.Run, and reports how the sandbox
// ended. Its errors about sp's fields name them as names does.
func runSandbox(ctx context.Context, g *globalFlags, f *runOptions, sp *spec.Sandbox, dns []netip.AddrPort, names fieldNames) error {
	// First, while every descriptor above 2 is one the caller passed.
	exitStatus, err := openExitStatus(f.exitStatusFD)
	if err != nil {
		return err
	}
	if exitStatus != nil {
		defer exitStatus.Close()
	}
	cfg, netCfg, err := planSandbox(sp, dns)
	if err != nil {
		return err
	}
	ctlSpec, err := parseControl(f.control)
	if err != nil {
		return err
	}
	switch {
	case f.tty && !term.IsTerminal(int(os.Stdin.Fd())):
		return errors.New("-t: the input device is not a TTY; drop -t, or run rungv on a terminal")
	case f.tty && sp.Restore != "":
		return errors.New("-t gives a command a terminal, and a restored sandbox starts none: drop -t")
	case len(f.copies) > 0 && sp.Restore != "":
		return errors.New("--copy copies before the command starts, and a restored sandbox starts none: drop --copy, and copy into it with the SDK (Upload, Python's upload)")
	case sp.KeepAlive && f.control == "":
		return &fieldError{"keep_alive", "", "leaves no way in without --control: add --control unix:PATH", nil}
	}
	s, err := g.store()
	if err != nil {
		return err
	}
	img, err := getOrPull(ctx, s, sp.Image, f.quiet, f.insecure)
	if err != nil {
		return err
	}
	// With keep-alive or restore there is no command to run, but execs
	// still take their defaults from the image and the spec.
	ps, err := resolveCommand(img.Config, sp)
	if err != nil && !(errors.Is(err, errNoCommand) && (sp.KeepAlive || sp.Restore != "")) {
		return err
	}
	f.needs.apply(os.Stderr, img.Config.Labels, sp, &cfg)
	if sp.Restore == "" && !sp.KeepAlive {
		if err := checkDockerd(ps.Argv, cfg.NFTables, f.needs == nil); err != nil {
			return err
		}
	}
	if cfg.Platform == sentry.PlatformKVM {
		if err := checkKVM(s.Root(), img.ErofsPath()); err != nil {
			return err
		}
	}

	h := &hostSide{}
	defer h.close()
	if err := h.open(f, sp, img, cfg, netCfg, ctlSpec); err != nil {
		return err
	}
	plan := h.plan
	plan.Init = initSpec(f, ps, h.stdout, h.stderr)
	plan.KeepAlive = sp.KeepAlive
	plan.Copies = f.copies
	plan.Defaults = host.Defaults{Env: ps.Env, Cwd: ps.Cwd, User: ps.User}
	plan.SnapshotHook = img.Config.Labels[image.SnapshotHookLabel]
	plan.Info = control.SandboxInfo{ID: sandboxID(), Image: img.ID, Rungv: version}
	plan.StopTimeout = f.stopTimeout
	plan.Timeout = time.Duration(sp.Timeout)
	plan.Signals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}
	exit, err := host.Run(ctx, plan, host.Hooks{
		Logf: logf,
		Ready: func() {
			h.releaseStreams()
			if f.selftest {
				violateLockdown()
			}
		},
		TimedOut: func() {
			fmt.Fprintf(os.Stderr, "rungv: %s %v reached; stopping the sandbox\n", names.name("timeout"), time.Duration(sp.Timeout))
		},
	})
	if err != nil {
		return bootError(err, sp, ps.Argv, cfg.Volumes)
	}
	return reportExit(exit, exitStatus, f.quiet, sp.Memory)
}

// initSpec is the command init runs, with the terminal and the input -t
// and -i give it; host.Run sets its user.
func initSpec(f *runOptions, ps processSpec, stdout, stderr *os.File) sentry.ProcessSpec {
	init := sentry.ProcessSpec{
		Argv:   ps.Argv,
		Env:    ps.Env,
		Cwd:    ps.Cwd,
		Stdout: stdout,
		Stderr: stderr,
		TTY:    f.tty,
	}
	if f.interactive || f.tty {
		init.Stdin = os.Stdin
	}
	if f.tty {
		init.Env = host.MergeEnv(init.Env, []string{"TERM=" + envOr("TERM", "xterm")})
	}
	return init
}

// bootError restates an error of host.Run before the sandbox ran as a
// problem with the spec's field at fault, or, for a command that cannot
// start, as docker run does: its message and exit status 127 (not found)
// or 126 (not runnable).
func bootError(err error, sp *spec.Sandbox, argv []string, vols []sentry.Volume) error {
	var se *host.StepError
	if !errors.As(err, &se) {
		return err
	}
	err = se.Err
	switch se.Step {
	case host.StepBoot:
		return volumeError(err, vols)
	case host.StepCopy:
		return fmt.Errorf("--copy: %w; nothing ran", err)
	case host.StepRestore:
		if errors.As(err, new(*sentry.VolumeError)) {
			return volumeError(err, vols)
		}
		return &fieldError{"restore", sp.Restore, fmt.Sprintf("cannot be restored: %v", err), err}
	case host.StepUser:
		if sp.User != "" {
			return &fieldError{"user", "", err.Error(), err}
		}
		return &fieldError{"user", "", fmt.Sprintf("the image's User: %v; give another to run as", err), err}
	}
	var wde *sentry.WorkingDirError
	if errors.As(err, &wde) {
		// Before host.StartFailureOf, which would take its errno for the
		// command's.
		if sp.Workdir != "" {
			return &fieldError{"workdir", fmt.Sprintf("%.64q", sp.Workdir), fmt.Sprintf("cannot be created in the sandbox: %v; give a directory that exists there or can be created", wde.Err), err}
		}
		return &fieldError{"workdir", "", fmt.Sprintf("the image's WorkingDir %q cannot be created in the sandbox: %v; give another", wde.Path, wde.Err), err}
	}
	if len(argv) > 0 {
		if f, ok := host.StartFailureOf(argv[0], err); ok {
			fmt.Fprintln(os.Stderr, "rungv:", f.Message)
			return exitError(f.Code)
		}
	}
	return host.SandboxError(err)
}

// reportExit reports how the sandbox ended: its exit status to the
// --exit-status-fd pipe, a word on stderr, and rungv's own exit status,
// the command's (0 after a checkpoint). memory is the sandbox's limit,
// for an OOM kill.
func reportExit(exit host.Exit, exitStatus *os.File, quiet bool, memory uint64) error {
	code := exit.Status.ExitCode()
	if exit.Checkpointed {
		code = 0
	}
	if exitStatus != nil {
		// From here on, rungv's exit status is the command's whatever
		// happens.
		writeExitStatus(exitStatus, code, exit.CloseErr)
	}
	if exit.Checkpointed {
		if !quiet {
			fmt.Fprintln(os.Stderr, "rungv: checkpointed; the sandbox stopped (continue it with rungv run --restore)")
		}
		return nil
	}
	if exit.Err != nil {
		fmt.Fprintln(os.Stderr, "rungv: copying the command's output:", exit.Err)
	}
	if exit.Status.OOMKilled {
		fmt.Fprintf(os.Stderr, "rungv: the sandbox reached its memory limit (%d MiB) and its OOM killer killed the init process, which ends the sandbox; files written to the root file system and to tmpfs count against the limit: give the sandbox more memory, or write large data to a volume\n", memory>>20)
	}
	if code != 0 {
		return exitError(code)
	}
	return nil
}

// logf writes one of rungv's messages, a line, to stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rungv: "+format+"\n", args...)
}

func getOrPull(ctx context.Context, s *store.Store, ref string, quiet, insecure bool) (*store.Image, error) {
	img, err := s.Get(ref)
	if err == nil || !errors.Is(err, store.ErrNotFound) {
		return img, err
	}
	opts := store.PullOptions{Options: image.Options{Insecure: insecure}}
	var r *pullReporter
	if !quiet {
		r = newPullReporter(os.Stderr)
		opts.Progress = r.event
	}
	img, err = s.Pull(ctx, ref, opts)
	if r != nil {
		r.finish()
	}
	return img, err
}

func sandboxID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
