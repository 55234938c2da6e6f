package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"z.gfire.dev/gvx/core/ext4lite"
	"z.gfire.dev/gvx/core/ext4lite/blockdev"
	"z.gfire.dev/gvx/core/internal/hostfile"
)

// newVolumeCommand is `rungv volume`: single-file ext4 volumes for
// `rungv run --mount type=volume,...`.
func newVolumeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "Create, check, clone and flatten single-file ext4 volumes",
		Long: `A volume is one host file holding an ext4 filesystem, which the sandbox's
kernel reads and writes itself (rungv run --mount type=volume,src=FILE,dst=/PATH).
A clone of a golden volume costs O(1): a reflink where the host filesystem
can, else a copy-on-write delta file over the golden, which stays read-only.`,
	}
	cmd.AddCommand(newVolumeCreateCommand(), newVolumeCheckCommand(), newVolumeCloneCommand(), newVolumeFlattenCommand())
	return cmd
}

func newVolumeCreateCommand() *cobra.Command {
	var size string
	cmd := &cobra.Command{
		Use:     "create FILE",
		Short:   "Create an empty volume (a sparse file: it takes space as it fills)",
		Example: "  rungv volume create data.ext4 --size 16G",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseBytes(size)
			if err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			if n < 16<<20 {
				return fmt.Errorf("--size %s: a volume needs at least 16M", size)
			}
			if _, err := os.Lstat(args[0]); err == nil {
				return fmt.Errorf("%s exists; remove it or pick another name", args[0])
			}
			return ext4lite.Create(args[0], int64(n))
		},
	}
	cmd.Flags().StringVar(&size, "size", "16G", "the filesystem's size, e.g. 512M, 16G")
	return cmd
}

func newVolumeCheckCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "Check a volume or clone without changing it (e2fsck -fn when installed)",
		Long: `Check runs e2fsck -fn on the volume (on a flattened copy of a delta), or
ext4lite's own verifier without e2fsprogs. It exits 0 when the filesystem is
clean and does not need journal recovery, 1 otherwise.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireVolume(args[0]); err != nil {
				return err
			}
			res, err := ext4lite.Check(args[0])
			if err != nil {
				return fmt.Errorf("checking %s: %w", args[0], err)
			}
			if res.Clean {
				fmt.Printf("%s: clean (%s)\n", args[0], res.Checker)
				return nil
			}
			fmt.Printf("%s: NOT clean (%s, exit code %d)\n", args[0], res.Checker, res.ExitCode)
			for _, p := range res.Problems {
				fmt.Println("  " + strings.TrimSpace(p))
			}
			if res.NeedsRecovery {
				fmt.Println("  the journal needs recovery: mounting the volume once (rungv run --mount) replays it")
			}
			return exitError(1)
		},
	}
}

func newVolumeCloneCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "clone GOLDEN EPISODE",
		Short: "Make EPISODE a writable O(1) copy of GOLDEN",
		Long: `Clone makes EPISODE a writable copy of the volume GOLDEN in constant time: a
reflink where the host filesystem supports it (XFS, btrfs), else a sparse
copy-on-write delta over GOLDEN. GOLDEN is only ever read; a delta is bound to
it (size, UUID, contents) and refuses to open over a changed or different
golden. Discard an episode by deleting its file.`,
		Example: "  rungv volume clone golden.ext4 episode-17.ext4",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			golden, episode := args[0], args[1]
			if err := requireVolume(golden); err != nil {
				return err
			}
			if isDelta, err := blockdev.IsDelta(golden); err != nil {
				return err
			} else if isDelta {
				return fmt.Errorf("%s is itself a clone (a delta); flatten it first: rungv volume flatten %s GOLDEN.ext4", golden, golden)
			}
			if _, err := os.Lstat(episode); err == nil {
				return fmt.Errorf("%s exists; remove it or pick another name", episode)
			}
			start := time.Now()
			method, err := ext4lite.Clone(golden, episode)
			if err != nil {
				return fmt.Errorf("cloning %s: %w", golden, err)
			}
			fmt.Fprintf(os.Stderr, "cloned %s to %s by %s in %v\n", golden, episode, method, time.Since(start).Round(time.Microsecond))
			return nil
		},
	}
}

func newVolumeFlattenCommand() *cobra.Command {
	var golden string
	cmd := &cobra.Command{
		Use:   "flatten EPISODE OUT.ext4",
		Short: "Write the volume a clone represents as a standalone image",
		Long: `Flatten writes the filesystem EPISODE holds to OUT as a standalone, sparse
image, which can be a new golden. A delta reads its golden from the path
recorded at clone time, or from --golden.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			episode, out := args[0], args[1]
			// --golden first: a value that cannot be a golden is wrong
			// whatever the episode is.
			if golden != "" {
				if err := requireGolden(golden); err != nil {
					return fmt.Errorf("--golden: %w", err)
				}
			}
			if err := requireVolume(episode); err != nil {
				return err
			}
			if _, err := os.Lstat(out); err == nil {
				return fmt.Errorf("%s exists; remove it or pick another name", out)
			}
			isDelta, err := blockdev.IsDelta(episode)
			if err != nil {
				return err
			}
			switch {
			case !isDelta && golden != "":
				return fmt.Errorf("--golden: %s is a standalone image, not a delta", episode)
			case !isDelta:
				err = ext4lite.Flatten(episode, out)
			default:
				err = flattenDelta(episode, golden, out)
			}
			if errors.Is(err, blockdev.ErrWrongGolden) {
				return fmt.Errorf("%s does not belong to its golden image (a different image, or one written since the clone was made); pass the golden it was cloned from with --golden: %w", episode, err)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&golden, "golden", "", "the golden image of a delta (default: the path recorded when it was cloned)")
	return cmd
}

// flattenDelta flattens a delta, over golden if given.
func flattenDelta(episode, golden, out string) error {
	d, err := blockdev.OpenDelta(episode, golden, true /* readOnly */)
	if err != nil {
		return err
	}
	defer d.Close()
	return blockdev.Flatten(d, out)
}

// requireVolume checks that path is an ext4 image or a delta, so every
// subcommand fails on anything else with the same clear message.
func requireVolume(path string) error {
	err := hostfile.CheckPath(path, hostfile.Regular)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s does not exist; give an ext4 volume file (`rungv volume create` makes one)", path)
	case err != nil:
		return err
	}
	if isDelta, err := blockdev.IsDelta(path); err == nil && isDelta {
		return nil
	}
	fs, err := ext4lite.OpenVolume(path, ext4lite.Options{ReadOnly: true})
	if errors.Is(err, blockdev.ErrInUse) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%s is not a usable ext4 volume (create one with `rungv volume create`): %w", path, err)
	}
	return fs.Close()
}

// requireGolden checks that path can be the golden image of a delta: a
// standalone ext4 image, not a delta itself.
func requireGolden(path string) error {
	if err := requireVolume(path); err != nil {
		return err
	}
	isDelta, err := blockdev.IsDelta(path)
	switch {
	case err != nil:
		return err
	case isDelta:
		return fmt.Errorf("%s is itself a clone (a delta); give the standalone image the episode was cloned from", path)
	}
	return nil
}
