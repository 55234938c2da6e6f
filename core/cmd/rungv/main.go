// Command rungv runs OCI images in gVisor's Sentry inside one unprivileged,
// self-locked process, and manages gvx's image cache.
//
//	rungv pull REF          convert an image into the cache
//	rungv images            list cached images
//	rungv rmi REF|ID...     remove images
//	rungv prune             remove unreferenced images
//	rungv run IMAGE [CMD]   run a command in a new sandbox
//	rungv volume ...        create, check, clone and flatten ext4 volumes
//
// Go re-reads the CPU quota every second to adjust GOMAXPROCS (Go 1.25+),
// with sched_getaffinity and cgroup file reads that the lockdown filter
// rightly denies; a sandbox sizes its CPUs once, at start.
//
//go:debug updatemaxprocs=0
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/store"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// globalFlags are the flags every subcommand takes.
type globalFlags struct {
	cache string
}

func main() {
	// A Sentry's core dump would hold guest memory and land in the user's
	// directory; rungv never writes one.
	unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		var exit exitError
		if errors.As(err, &exit) {
			// Already reported.
			os.Exit(int(exit))
		}
		fmt.Fprintln(os.Stderr, "rungv:", err)
		os.Exit(1)
	}
}

// exitError makes rungv exit with a given status without further output.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func newRootCommand() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "rungv",
		Short: "Run OCI images in gVisor's Sentry inside one unprivileged process",
		Long: `rungv runs OCI images in gVisor's Sentry kernel inside one unprivileged,
self-locked process, with a read-only EROFS root filesystem from gvx's image
cache (` + "`rungv pull`" + `) and state in single-file ext4 volumes.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(flagError)
	root.PersistentFlags().StringVar(&g.cache, "cache", "", "image cache directory (default $GVX_CACHE or ~/.cache/gvx)")
	root.AddCommand(
		newPullCommand(g),
		newImagesCommand(g),
		newRmiCommand(g),
		newPruneCommand(g),
		newRunCommand(g),
		newCheckpointCommand(),
		newVolumeCommand(),
		newJanitorCommand(),
		newPlatformProbeCommand(),
	)
	return root
}

// flagError rewrites the errors of parsing flags, which quote strconv
// ("strconv.ParseInt: parsing \"x\": invalid syntax"), to say what to give.
// Subcommands inherit it from the root.
func flagError(cmd *cobra.Command, err error) error {
	var invalid *pflag.InvalidValueError
	if errors.As(err, &invalid) {
		f := invalid.GetFlag()
		what := "is not valid"
		if errors.Is(err, strconv.ErrRange) {
			what = "is out of range"
		}
		return fmt.Errorf("--%s %q %s: %s", f.Name, invalid.GetValue(), what, flagWant(f.Value.Type()))
	}
	return fmt.Errorf("%w (`%s --help` lists the flags it takes)", err, cmd.CommandPath())
}

// flagWant says what a flag of a pflag value type takes.
func flagWant(typ string) string {
	switch typ {
	case "bool":
		return "give true or false, or the flag alone for true"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "give a whole number"
	case "float32", "float64":
		return "give a number, such as 2 or 0.5"
	case "duration":
		return "give a duration such as 30s, 5m or 1h30m"
	}
	return "see --help for what it takes"
}

func (g *globalFlags) store() (*store.Store, error) {
	s, err := store.Open(g.cache)
	if err != nil && g.cache != "" {
		return nil, fmt.Errorf("--cache: %w; give a directory rungv can create and write", err)
	}
	return s, err
}
