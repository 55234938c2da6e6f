package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/internal/atomicfile"
)

func newCheckpointCommand() *cobra.Command {
	var controlAddr, output string
	var stop bool
	cmd := &cobra.Command{
		Use:   "checkpoint --control unix:PATH -o FILE [--stop]",
		Short: "Write a snapshot of a running sandbox, to continue it later with run --restore",
		Long: `Checkpoint asks the sandbox serving the control endpoint for a snapshot:
its kernel, every process with its memory, and the files of its root's writable
layer. ` + "`rungv run --restore FILE IMAGE`" + ` continues it in a new process, where its
programs go on without starting again (a ready dockerd answers at once).

A sandbox with volumes must --stop: it ends once the snapshot is written, and each
volume's image is then the snapshot's other half; restore each time with a clone
(` + "`rungv volume clone`" + `). So must a sandbox with --network nat. Otherwise the
sandbox may run on.

Not in a snapshot: running execs (refused: wait for them); connections in
progress through published ports and the NAT (closed as the checkpoint starts;
the ports are made again from the flags given to run --restore); and the
network interfaces and netfilter rules the guest made, which an image carries
with a snapshot hook (label ` + image.SnapshotHookLabel + `).`,
		Example: `  rungv run --control unix:/tmp/seed.sock --nftables --net-raw \
      --mount type=volume,src=golden.ext4,dst=/var/lib/docker oci:./docker:latest &
  rungv checkpoint --control unix:/tmp/seed.sock --stop -o ready.snap
  rungv volume clone golden.ext4 episode.ext4
  rungv run --restore ready.snap --nftables --net-raw \
      --mount type=volume,src=episode.ext4,dst=/var/lib/docker oci:./docker:latest`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := checkpointSource(controlAddr)
			if err != nil {
				return err
			}
			if err := checkSnapshotOutput(output); err != nil {
				return err
			}
			return checkpoint(cmd.Context(), controlAddr, path, output, stop)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&controlAddr, "control", "", "the sandbox's control endpoint, unix:PATH")
	fl.StringVarP(&output, "output", "o", "", "the snapshot file to write")
	fl.BoolVar(&stop, "stop", false, "end the sandbox once the snapshot is written (needed with volumes)")
	return cmd
}

// checkpointSource checks checkpoint's --control, unix:PATH, and returns
// the path.
func checkpointSource(addr string) (string, error) {
	if addr == "" {
		return "", errors.New("checkpoint needs --control unix:PATH: give the control endpoint the sandbox was started with (rungv run --control unix:PATH)")
	}
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok || path == "" {
		return "", fmt.Errorf("--control %q: give unix:PATH, the control endpoint the sandbox was started with (rungv run --control unix:PATH)", addr)
	}
	if err := checkSocketPath(path); err != nil {
		return "", fmt.Errorf("--control %s: %w", addr, err)
	}
	return path, nil
}

// checkSnapshotOutput checks checkpoint's -o before the sandbox is asked
// for a snapshot it would have nowhere to put.
func checkSnapshotOutput(output string) error {
	if output == "" {
		return errors.New("checkpoint needs --output (-o) FILE: give the file to write the snapshot to")
	}
	if st, err := os.Stat(output); err == nil && st.IsDir() {
		return fmt.Errorf("--output %s is a directory; give the path of the snapshot file to write", output)
	}
	if err := checkParentDir(output); err != nil {
		return fmt.Errorf("--output %s: %w", output, err)
	}
	return nil
}

// checkpoint writes the snapshot whole or not at all, so a failed
// checkpoint leaves no partial snapshot.
func checkpoint(ctx context.Context, addr, path, output string, stop bool) error {
	c, err := control.Dial(ctx, path)
	var dialErr *net.OpError
	switch {
	case errors.As(err, &dialErr):
		// Nothing serves the endpoint: the flag is what is wrong.
		return fmt.Errorf("--control %s: no sandbox answers there (%v); give the control endpoint of a running sandbox, as its rungv run --control named it", addr, dialErr.Err)
	case err != nil:
		return fmt.Errorf("--control %s: %w", addr, err)
	}
	defer c.Close()
	if err := atomicfile.Write(output, func(f *os.File) error {
		_, err := c.Checkpoint(ctx, control.CheckpointRequest{Stop: stop}, f)
		return err
	}); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}
