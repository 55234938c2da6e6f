package main

import (
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"z.gfire.dev/gvx/core/host"
	"z.gfire.dev/gvx/core/spec"
)

// runOptions are the flags of `rungv run` that say how to run the sandbox,
// not what it is: the spec (sandboxFlags, or --spec) says that.
type runOptions struct {
	spec        string
	control     string
	quiet       bool
	insecure    bool
	debug       bool
	tty         bool
	interactive bool
	rm          bool
	stopTimeout time.Duration
	idleTrim    time.Duration
	trapSeccomp bool
	selftest    bool
	dnsUpstream []string // test only: resolvers for the DNS relay
	copyFlags   []string // --copy's values, which check parses into copies
	copies      []host.Copy

	// exitStatusFD: see openExitStatus.
	exitStatusFD int

	// needs says which features the image's image.NeedsLabel may turn
	// on; nil with --spec.
	needs *needsPolicy
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
	fl.BoolVar(&f.insecure, "insecure", false, "allow plain HTTP and unverified TLS to the registry if IMAGE must be pulled")
	fl.BoolVar(&f.debug, "debug", false, "write gVisor's debug log to stderr")
	fl.BoolVar(&f.trapSeccomp, "debug-seccomp", false, "report a host system call outside the allowlist with a stack trace instead of dying silently")
	fl.MarkHidden("debug-seccomp")
	fl.BoolVar(&f.selftest, "debug-lockdown-selftest", false, "after the sandbox starts, make a forbidden host system call: rungv must die with SIGSYS")
	fl.MarkHidden("debug-lockdown-selftest")
	fl.DurationVar(&f.idleTrim, "idle-trim", defaultIdleTrim, "after this long without a control request, unmap rungv's own code and read-only data (0: never; default $"+idleTrimEnv+" or 30s); the pages stay in the page cache")
	fl.MarkHidden("idle-trim")
	addCopyFlags(fl, &f.copyFlags)
	fl.StringArrayVar(&f.dnsUpstream, "dns-upstream", nil, "test only: relay DNS to ADDR:PORT instead of the host's resolvers")
	fl.MarkHidden("dns-upstream")
}

// check checks the options, parses --copy, and reads $GVX_IDLE_TRIM
// unless fl has --idle-trim.
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
	var err error
	if f.copies, err = parseCopies(f.copyFlags); err != nil {
		return nil, err
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
  rungv run --copy ./src:/work -w /work oci:./img:latest make test
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
				f.needs = newNeedsPolicy(sandbox)
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

// outputDrainTimeout bounds how long an exiting rungv waits for init's
// output to reach the regular files its stdout and stderr are.
const outputDrainTimeout = 5 * time.Second
