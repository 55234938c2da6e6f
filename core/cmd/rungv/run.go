package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/host"
	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/internal/exetrim"
	"z.gfire.dev/gvx/core/internal/hostfile"
	"z.gfire.dev/gvx/core/lockdown"
	"z.gfire.dev/gvx/core/netstack"
	"z.gfire.dev/gvx/core/sentry"
	"z.gfire.dev/gvx/core/spec"
	"z.gfire.dev/gvx/core/store"
)

// runOptions are the flags of `rungv run` that say how to run the sandbox,
// not what it is: the spec (sandboxFlags, or --spec) says that.
type runOptions struct {
	spec        string
	control     string
	quiet       bool
	debug       bool
	tty         bool
	interactive bool
	rm          bool
	stopTimeout time.Duration
	idleTrim    time.Duration
	trapSeccomp bool
	selftest    bool
	dnsUpstream []string // test only: resolvers for the DNS relay

	// exitStatusFD: see openExitStatus.
	exitStatusFD int
}

// register adds the flags to fl.
func (f *runOptions) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.spec, "spec", "", "read the sandbox's spec, core/spec's JSON, from `SOURCE`: fd:N (an inherited descriptor, read to its end) or a file; the spec then gives the image, command and every flag that describes the sandbox, which are refused beside it")
	fl.BoolVarP(&f.tty, "tty", "t", false, "give the command a terminal")
	fl.BoolVarP(&f.interactive, "interactive", "i", false, "keep stdin open and pass it to the command")
	fl.BoolVar(&f.rm, "rm", true, "remove the sandbox when it exits (always: nothing outlives rungv)")
	fl.DurationVar(&f.stopTimeout, "stop-timeout", 10*time.Second, "how long to wait after SIGTERM before killing")
	fl.StringVar(&f.control, "control", "", "serve the control protocol: unix:PATH, or fd:N (an inherited connected socket)")
	fl.IntVar(&f.exitStatusFD, "exit-status-fd", 0, "write the command's exit status, as a decimal line, to inherited descriptor `N` (a pipe) just before exiting for its end: a caller that finds no status there knows that rungv itself failed, whatever its own exit status; a second line, Go-quoted, follows only if closing the sandbox failed (its volumes not written back) and says why")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "do not report pulling the image")
	fl.BoolVar(&f.debug, "debug", false, "write gVisor's debug log to stderr")
	fl.BoolVar(&f.trapSeccomp, "debug-seccomp", false, "report a host system call outside the allowlist with a stack trace instead of dying silently")
	fl.MarkHidden("debug-seccomp")
	fl.BoolVar(&f.selftest, "debug-lockdown-selftest", false, "after the sandbox starts, make a forbidden host system call: rungv must die with SIGSYS")
	fl.MarkHidden("debug-lockdown-selftest")
	fl.DurationVar(&f.idleTrim, "idle-trim", defaultIdleTrim, "after this long without a control request, unmap rungv's own code and read-only data (0: never; default $"+idleTrimEnv+" or 30s); the pages stay in the page cache")
	fl.MarkHidden("idle-trim")
	fl.StringArrayVar(&f.dnsUpstream, "dns-upstream", nil, "test only: relay DNS to ADDR:PORT instead of the host's resolvers")
	fl.MarkHidden("dns-upstream")
}

// check checks the options, and reads $GVX_IDLE_TRIM unless fl has
// --idle-trim.
func (f *runOptions) check(fl *pflag.FlagSet) ([]netip.AddrPort, error) {
	if v := os.Getenv(idleTrimEnv); v != "" && !fl.Changed("idle-trim") {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%s=%q: want a duration such as 1s or 30s, or 0 to never trim", idleTrimEnv, v)
		}
		f.idleTrim = d
	}
	switch {
	case f.stopTimeout < 0:
		return nil, fmt.Errorf("--stop-timeout %v is negative; give a duration such as 10s, or 0 to kill at once after SIGTERM", f.stopTimeout)
	case f.idleTrim < 0:
		return nil, fmt.Errorf("--idle-trim %v is negative; give a duration such as 30s, or 0 to never trim", f.idleTrim)
	}
	var dns []netip.AddrPort
	for _, s := range f.dnsUpstream {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return nil, fmt.Errorf("--dns-upstream %s: want ADDR:PORT", s)
		}
		dns = append(dns, ap)
	}
	return dns, nil
}

func newRunCommand(g *globalFlags) *cobra.Command {
	f := &runOptions{}
	sf := &sandboxFlags{}
	// The flags that describe the sandbox, apart, for --spec to refuse.
	sandbox := pflag.NewFlagSet("sandbox", pflag.ContinueOnError)
	sf.register(sandbox)
	cmd := &cobra.Command{
		Use:   "run [flags] IMAGE [COMMAND [ARG...]]",
		Short: "Run a command in a new sandbox",
		Long: `Run boots gVisor's Sentry inside this process with IMAGE's root filesystem
(read-only EROFS from the cache, pulled first if missing, under an in-memory
writable layer) and runs the image's command, or COMMAND. The process locks
itself down (no new privileges, no capabilities, a seccomp allowlist) before
any guest code runs. rungv exits with the command's exit code (128+N if
signal N killed it).

With --spec, a JSON sandbox spec (package core/spec: image, entrypoint, cmd,
env, limits, network, ports, mounts, ...) describes the sandbox instead of
IMAGE, COMMAND and the flags that describe it; the flags that say how to
run it (--control, --exit-status-fd, --quiet, -i, -t, --stop-timeout,
--debug) still apply. The Go, C and Python SDKs start sandboxes this way.`,
		Example: `  rungv run busybox echo hello
  rungv run -e A=1 -w /tmp -u 1000 --memory 512m oci:./img:latest sh -c 'id; pwd'
  rungv run --control unix:/tmp/box.sock --keep-alive oci:./img:latest
  rungv run --network nat -p unix:/tmp/box-docker.sock:2375 -p 8080:80 oci:./img:latest
  rungv run --restore ready.snap --mount type=volume,src=episode.ext4,dst=/var/lib/docker oci:./docker:latest
  echo '{"image": "busybox", "cmd": ["echo", "hello"], "memory": 536870912}' > box.json; rungv run --spec box.json
  rungv run --control unix:/tmp/box.sock --spec fd:3 3< box.json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("spec") {
				return nil // refused with a word about --spec
			}
			return cobra.MinimumNArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := refuseDockerOnlyFlags(cmd.Flags()); err != nil {
				return err
			}
			dns, err := f.check(cmd.Flags())
			if err != nil {
				return err
			}
			var sp spec.Sandbox
			var names fieldNames
			if cmd.Flags().Changed("spec") {
				if err := refuseSandboxFlags(sandbox, args); err != nil {
					return err
				}
				if sp, err = readSpec(f.spec); err != nil {
					return err
				}
				names = specNames{}
			} else {
				var given flagNames
				if sp, given, err = sf.toSpec(sandbox, args); err != nil {
					return err
				}
				names = given
			}
			return names.explain(runSandbox(cmd.Context(), g, f, &sp, dns, names))
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false) // flags after IMAGE belong to the command
	fl.AddFlagSet(sandbox)
	f.register(fl)
	addDockerOnlyFlags(fl)
	return cmd
}

// runSandbox implements `rungv run`: it runs the sandbox sp describes, as
// f says. Its errors about sp's fields name them as names does.
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
	case sp.KeepAlive && f.control == "":
		return &fieldError{"keep_alive", "", "leaves no way in without --control: add --control unix:PATH", nil}
	}
	s, err := g.store()
	if err != nil {
		return err
	}
	img, err := getOrPull(ctx, s, sp.Image, f.quiet)
	if err != nil {
		return err
	}
	// With keep-alive or restore there is no command to run, but execs
	// still take their defaults from the image and the spec.
	ps, err := resolveCommand(img.Config, sp)
	if err != nil && !(errors.Is(err, errNoCommand) && (sp.KeepAlive || sp.Restore != "")) {
		return err
	}

	if cfg.Platform == sentry.PlatformKVM {
		if err := checkKVM(s.Root(), img.ErofsPath()); err != nil {
			return err
		}
	}

	// Everything on the host is opened before the sandbox exists: after
	// Start the process can open nothing.
	var exeRanges *exetrim.Ranges
	if f.idleTrim > 0 {
		if exeRanges, err = exetrim.Find(); err != nil {
			return err
		}
	}
	erofsFile, err := os.Open(img.ErofsPath())
	if err != nil {
		return fmt.Errorf("opening the image's root filesystem: %w (try `rungv rmi %s` and pull again)", err, img.ShortID())
	}
	defer erofsFile.Close()
	var snapshot *os.File
	if sp.Restore != "" {
		if snapshot, err = hostfile.Open(sp.Restore, os.O_RDONLY, hostfile.Regular); err != nil {
			return &fieldError{"restore", "", err.Error(), err}
		}
		defer snapshot.Close()
	}
	ctl, err := openControl(ctlSpec)
	if err != nil {
		return err
	}
	defer ctl.close()
	nw, err := openNetwork(netCfg, debugLogf(f.debug))
	if err != nil {
		return err
	}
	defer nw.Close()
	if !f.quiet {
		nw.announceChosenPorts(os.Stderr)
	}
	janitor, err := startJanitorFor(ctl, nw)
	if err != nil {
		return err
	}
	defer janitor.Close() // the janitor removes the sockets once rungv is gone
	cfg.Image = erofsFile
	if err := createMissingVolumes(cfg.Volumes); err != nil {
		return err
	}
	cfg.Lockdown = lockdown.Options{ControlFD: ctl.listenFD(), TrapViolations: f.trapSeccomp}
	nw.configure(&cfg)
	if f.debug {
		cfg.LogWriter, cfg.Debug = os.Stderr, true
	}
	cfg.VolumeErrors = prefixWriter{w: os.Stderr, prefix: "rungv: "}
	var outs outputPipes
	stdout, stderr, releaseStreams, err := outs.initStreams()
	if err != nil {
		return err
	}
	// Registered before the sandbox's Close, so it runs after it: the
	// copies to regular files end once the sandbox and rungv let go of
	// the pipes. rungv's copies go first, or a start that fails before
	// init holds them would wait out the timeout.
	defer func() {
		releaseStreams()
		outs.wait(outputDrainTimeout)
	}()

	var sb *sentry.Sandbox
	var p *sentry.Process
	if snapshot != nil {
		// Nothing reaches the restored guest before its snapshot hook
		// has run (see below).
		nw.Suspend()
		var stdin *os.File
		if f.interactive {
			stdin = os.Stdin
		}
		if sb, err = sentry.Restore(cfg, snapshot, sentry.RestoreStdio{Stdin: stdin, Stdout: stdout, Stderr: stderr}); err != nil {
			if errors.As(err, new(*sentry.VolumeError)) {
				return volumeError(err, cfg.Volumes)
			}
			return &fieldError{"restore", sp.Restore, fmt.Sprintf("cannot be restored: %v", err), err}
		}
		p = sb.Init()
	} else if sb, err = sentry.New(cfg); err != nil {
		return volumeError(err, cfg.Volumes)
	}
	defer sb.Close()

	// Checked before init starts, and after a restore too: execs run as
	// this user unless they name another.
	u, err := host.ResolveUser(ctx, sb, ps.User)
	if err != nil {
		if sp.User != "" {
			return &fieldError{"user", "", err.Error(), err}
		}
		return &fieldError{"user", "", fmt.Sprintf("the image's User: %v; give another to run as", err), err}
	}
	if p == nil {
		if p, err = startInit(ctx, sb, nw, f, sp, ps, u, stdout, stderr); err != nil {
			return err
		}
	}
	releaseStreams()

	stopper := newStopper(sb, p, f.stopTimeout)
	backend := host.New(host.Config{
		Sandbox:      sb,
		Defaults:     host.Defaults{Env: ps.Env, Cwd: ps.Cwd, User: ps.User},
		Stop:         stopper.stop,
		SnapshotHook: img.Config.Labels[image.SnapshotHookLabel],
		Network:      nw,
		Info: control.SandboxInfo{
			ID:       sandboxID(),
			PID:      os.Getpid(),
			Image:    img.ID,
			Hostname: cfg.Hostname,
			Platform: string(cfg.Platform),
			Spinning: cfg.Platform == sentry.PlatformSystrap && !cfg.NoSpinning,
			Rungv:    version,
			Ports:    nw.ports(),
		},
	})
	if snapshot != nil {
		if err := backend.RestoreHook(ctx); err != nil {
			return err
		}
		nw.Resume()
	}
	if f.selftest {
		violateLockdown()
	}
	srv := control.NewServer(backend)
	if f.idleTrim > 0 {
		// Start-up touched most of rungv's binary; an idle sandbox needs
		// little of it. See package exetrim and defaultIdleTrim.
		trimmer := exeRanges.TrimWhenQuiet(f.idleTrim)
		defer trimmer.Stop()
		srv.Track = trimmer.Track
	}
	serveCtx, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	ctl.serve(serveCtx, srv, func() {
		// The parent that owned the control connection is gone: nothing
		// may outlive it.
		stopper.stop(0)
	})

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	var timeout <-chan time.Time
	if sp.Timeout > 0 {
		timeout = time.After(time.Duration(sp.Timeout))
	}
	for {
		select {
		case <-p.Done():
			st, err := p.Wait()
			nw.Drain(publishedDrainTimeout)
			closeErr := sb.Close()
			if closeErr != nil {
				fmt.Fprintln(os.Stderr, "rungv:", closeErr)
			}
			// The request that ended the sandbox (a checkpoint that
			// stops it, a shutdown) still gets its answer, and the
			// client that started it its handshake.
			srv.WaitAnswered(answerDrainTimeout)
			stopServing()
			checkpointed := backend.Checkpointed()
			if exitStatus != nil {
				// From here on, rungv's exit status is the command's
				// (0 after a checkpoint) whatever happens.
				code := st.ExitCode()
				if checkpointed {
					code = 0
				}
				writeExitStatus(exitStatus, code, closeErr)
			}
			if checkpointed {
				if !f.quiet {
					fmt.Fprintln(os.Stderr, "rungv: checkpointed; the sandbox stopped (continue it with rungv run --restore)")
				}
				return nil
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "rungv: copying the command's output:", err)
			}
			if st.OOMKilled {
				fmt.Fprintf(os.Stderr, "rungv: the sandbox reached its memory limit (%d MiB) and its OOM killer killed the init process, which ends the sandbox; files written to the root file system and to tmpfs count against the limit: give the sandbox more memory, or write large data to a volume\n", sp.Memory>>20)
			}
			if st.ExitCode() != 0 {
				return exitError(st.ExitCode())
			}
			return nil
		case sig := <-sigs:
			// Forward to init; a stop follows for the signals that end
			// things, so a guest that ignores them still goes.
			if ctl.conn != nil {
				// Started by a program, which keeps stderr's tail for
				// its errors: a sandbox that ends this way says so. A
				// person at a terminal pressed the key and knows.
				fmt.Fprintf(os.Stderr, "rungv: received %v; passed it to the sandbox's init\n", unix.SignalName(sig.(syscall.Signal)))
			}
			p.Signal(sig.(syscall.Signal))
			if sig != syscall.SIGHUP {
				stopper.deadline()
			}
		case <-timeout:
			fmt.Fprintf(os.Stderr, "rungv: %s %v reached; stopping the sandbox\n", names.name("timeout"), time.Duration(sp.Timeout))
			stopper.stop(f.stopTimeout)
		}
	}
}

// startInit starts the sandbox's init: the command (ps) as user u, or the
// idle init for a keep-alive sandbox.
func startInit(ctx context.Context, sb *sentry.Sandbox, nw *sandboxNetwork, f *runOptions, sp *spec.Sandbox, ps processSpec, u host.User, stdout, stderr *os.File) (*sentry.Process, error) {
	nw.prepareGuest(ctx, sb)
	init := sentry.ProcessSpec{
		Argv:   ps.Argv,
		Env:    host.WithHome(ps.Env, u.Home),
		Cwd:    ps.Cwd,
		UID:    u.UID,
		GID:    u.GID,
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
	var p *sentry.Process
	var err error
	if sp.KeepAlive {
		p, err = sb.StartIdle()
	} else {
		p, err = sb.Start(init)
	}
	var wde *sentry.WorkingDirError
	if errors.As(err, &wde) {
		// Before host.StartFailureOf, which would take its errno for the
		// command's.
		if sp.Workdir != "" {
			return nil, &fieldError{"workdir", fmt.Sprintf("%.64q", sp.Workdir), fmt.Sprintf("cannot be created in the sandbox: %v; give a directory that exists there or can be created", wde.Err), err}
		}
		return nil, &fieldError{"workdir", "", fmt.Sprintf("the image's WorkingDir %q cannot be created in the sandbox: %v; give another", wde.Path, wde.Err), err}
	}
	if err != nil {
		// Exit statuses as docker run's: 127 not found, 126 not runnable.
		if f, ok := host.StartFailureOf(init.Argv[0], err); ok {
			fmt.Fprintln(os.Stderr, "rungv:", f.Message)
			return nil, exitError(f.Code)
		}
		return nil, host.SandboxError(err)
	}
	return p, nil
}

// spinEnv sets the spin of sandboxes whose spec does not (--spin unset).
const spinEnv = "GVX_SPIN"

// idleTrimEnv sets --idle-trim for rungv processes that the SDK, the C ABI
// or Python start.
const idleTrimEnv = "GVX_IDLE_TRIM"

// defaultIdleTrim is long enough that a sandbox in use, whose commands come
// seconds apart, is never trimmed: a trim makes the next command fault the
// binary's pages back in, which made the first commands of a fleet of 128
// sandboxes 13% slower when it trimmed after 1 s. A sandbox left idle for
// longer, in a warm pool or a paused episode, gives its mappings back.
const defaultIdleTrim = 30 * time.Second

// answerDrainTimeout bounds how long an ending sandbox waits for the
// control requests in progress to be answered.
const answerDrainTimeout = 2 * time.Second

// outputDrainTimeout bounds how long an exiting rungv waits for init's
// output to reach the regular files its stdout and stderr are.
const outputDrainTimeout = 5 * time.Second

// publishedDrainTimeout bounds how long an exiting sandbox waits for its
// published connections to deliver what the guest wrote before it exited
// (a guest that answered and exited at once, as `nc -e cat` does).
const publishedDrainTimeout = time.Second

func getOrPull(ctx context.Context, s *store.Store, ref string, quiet bool) (*store.Image, error) {
	img, err := s.Get(ref)
	if err == nil || !errors.Is(err, store.ErrNotFound) {
		return img, err
	}
	opts := store.PullOptions{}
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

// stopper stops a sandbox once: SIGTERM to init, then after the grace
// period everything is killed.
type stopper struct {
	sb    *sentry.Sandbox
	init  *sentry.Process
	grace time.Duration
	once  sync.Once
}

func newStopper(sb *sentry.Sandbox, init *sentry.Process, grace time.Duration) *stopper {
	return &stopper{sb: sb, init: init, grace: grace}
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

// controlEndpoint is where clients reach the control server.
type controlEndpoint struct {
	listener *net.UnixListener // unix:PATH
	file     *janitorFile      // the socket file, for the janitor
	conn     net.Conn          // fd:N
}

// controlSpec is a checked --control value: a socket path to bind, or an
// inherited descriptor.
type controlSpec struct {
	spec string // as given, for errors
	path string // unix:PATH
	fd   int    // fd:N
}

// parseControl checks --control before anything is pulled or booted.
func parseControl(spec string) (controlSpec, error) {
	c := controlSpec{spec: spec}
	switch {
	case spec == "":
		return c, nil
	case strings.HasPrefix(spec, "unix:"):
		c.path = strings.TrimPrefix(spec, "unix:")
		if err := checkSocketPath(c.path); err != nil {
			return c, fmt.Errorf("--control %s: %w", spec, err)
		}
		if _, err := os.Lstat(c.path); err == nil {
			return c, fmt.Errorf("--control %s: the path exists; remove it or pick another (is another sandbox using it?)", spec)
		}
		if err := checkParentDir(c.path); err != nil {
			return c, fmt.Errorf("--control %s: %w", spec, err)
		}
		return c, nil
	case strings.HasPrefix(spec, "fd:"):
		n, err := strconv.Atoi(strings.TrimPrefix(spec, "fd:"))
		if err != nil || n < 3 {
			return c, fmt.Errorf("--control %s: want fd:N with N >= 3, an inherited connected socket", spec)
		}
		c.fd = n
		return c, nil
	}
	return c, fmt.Errorf("--control %q: use unix:PATH or fd:N", spec)
}

// openControl binds or takes over the endpoint c names.
func openControl(c controlSpec) (*controlEndpoint, error) {
	switch {
	case c.path != "":
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: c.path, Net: "unix"})
		if err != nil {
			return nil, fmt.Errorf("--control %s: %w; pick a path in a directory rungv can write", c.spec, err)
		}
		// After lockdown unlink is denied; the janitor removes the file.
		l.SetUnlinkOnClose(false)
		if err := os.Chmod(c.path, 0o600); err != nil {
			l.Close()
			os.Remove(c.path)
			return nil, err
		}
		id, err := identify(c.path)
		if err != nil {
			l.Close()
			os.Remove(c.path)
			return nil, err
		}
		return &controlEndpoint{listener: l, file: &id}, nil
	case c.fd != 0:
		file := os.NewFile(uintptr(c.fd), "control")
		conn, err := net.FileConn(file)
		file.Close()
		if err != nil {
			return nil, fmt.Errorf("--control %s: %w (pass a connected unix socket)", c.spec, err)
		}
		return &controlEndpoint{conn: conn}, nil
	}
	return &controlEndpoint{}, nil
}

// checkSocketPath checks a unix socket path a flag names before anything
// binds or dials it: the kernel refuses one too long for sun_path with
// EINVAL, which says neither which flag nor what to give.
func checkSocketPath(path string) error {
	switch {
	case path == "":
		return errors.New("the socket path is empty; give one, e.g. /tmp/box.sock")
	case len(path) > netstack.MaxUnixPath:
		return fmt.Errorf("the path is %d bytes, more than the %d a unix socket's address holds (sun_path); pick a shorter path, e.g. in /tmp", len(path), netstack.MaxUnixPath)
	}
	return nil
}

// checkParentDir checks that the directory a file is to be made in
// exists, for the flags that name a file rungv creates.
func checkParentDir(path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("the directory %s does not exist; create it or pick a path in an existing directory", dir)
	case err != nil:
		return err
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory; pick a path in a directory", dir)
	}
	return nil
}

// openExitStatus returns the inherited descriptor fd that --exit-status-fd
// names, or nil if it is 0. rungv writes the command's exit status there
// once the command ended, so that its caller can tell that status from
// rungv's own failure: a Go crash exits 2, a killed rungv has a signal,
// and either would otherwise pass for the command's.
func openExitStatus(fd int) (*os.File, error) {
	if fd == 0 {
		return nil, nil
	}
	if fd < 3 {
		return nil, fmt.Errorf("--exit-status-fd %d: want a descriptor >= 3 that the caller passed, the write end of a pipe", fd)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("--exit-status-fd %d: %w: pass the write end of a pipe as descriptor %d", fd, err, fd)
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO || flags&unix.O_ACCMODE == unix.O_RDONLY {
		return nil, fmt.Errorf("--exit-status-fd %d: descriptor %d is not the write end of a pipe: pass one", fd, fd)
	}
	// Nothing rungv starts may hold it: its end is how the caller
	// learns that rungv is gone.
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "exit-status"), nil
}

// exitStatusMax is PIPE_BUF: a write of at most this many bytes goes into
// an empty pipe at once and whole, without a reader.
const exitStatusMax = 4096

// writeExitStatus writes the command's exit status as a decimal line to
// the --exit-status-fd pipe and, if closing the sandbox failed (its
// volumes not written back), a second line with the error, Go-quoted so
// that it is one line, shortened to fit exitStatusMax. Both go in one
// write, so the caller finds both lines or neither. A caller that reads
// only one line finds no exit status when there are two, which it takes
// for a failure of rungv: so it is.
func writeExitStatus(w io.Writer, code int, closeErr error) error {
	out := strconv.Itoa(code) + "\n"
	if closeErr != nil {
		msg := closeErr.Error()
		line := strconv.Quote(msg)
		for len(out)+len(line)+1 > exitStatusMax {
			msg = msg[:len(msg)*3/4]
			line = strconv.Quote(msg + " …")
		}
		out += line + "\n"
	}
	_, err := io.WriteString(w, out)
	return err
}

// listenFD is the listening socket's descriptor for the lockdown rules,
// or 0.
func (c *controlEndpoint) listenFD() int {
	if c.listener == nil {
		return 0
	}
	sc, err := c.listener.SyscallConn()
	if err != nil {
		return 0
	}
	fd := 0
	sc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// serve starts serving in the background. For an inherited connection,
// gone is called when the peer closes it.
func (c *controlEndpoint) serve(ctx context.Context, srv *control.Server, gone func()) {
	srv.Logf = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "rungv: "+format+"\n", args...)
	}
	switch {
	case c.listener != nil:
		go srv.Serve(ctx, c.listener)
	case c.conn != nil:
		srv.ServeConnAsync(ctx, c.conn, func(err error) {
			if ctx.Err() != nil {
				return // the sandbox ended first
			}
			// Said on stderr, whose tail the caller keeps for its
			// errors, so that a sandbox ended this way says why.
			if err == nil || errors.Is(err, io.EOF) {
				fmt.Fprintln(os.Stderr, "rungv: the caller closed the control connection without a shutdown (its process ended, or its end of the connection was closed); stopping the sandbox")
			} else {
				fmt.Fprintf(os.Stderr, "rungv: control connection: %v; stopping the sandbox\n", err)
			}
			gone()
		})
	}
}

// close stops listening; the janitor removes the socket file when rungv
// exits.
func (c *controlEndpoint) close() {
	if c.listener != nil {
		c.listener.Close()
	}
	if c.conn != nil {
		c.conn.Close()
	}
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
