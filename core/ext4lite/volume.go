package ext4lite

import (
	"fmt"
	"os"

	"z.gfire.dev/gvx/core/ext4lite/blockdev"
	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// Clone makes episode a writable copy of the image golden in O(1): a
// reflink where the host filesystem supports FICLONE, a copy-on-write delta
// over the read-only golden otherwise. Open the episode with OpenVolume.
func Clone(golden, episode string) (blockdev.CloneMethod, error) {
	if err := checkSuperblock(golden); err != nil {
		return 0, err
	}
	return blockdev.Clone(golden, episode)
}

// checkSuperblock refuses to clone a file that is not an intact ext4 image
// (or a delta over one), so the mistake shows here and not at mount time.
func checkSuperblock(path string) error {
	if isDelta, err := blockdev.IsDelta(path); err != nil || isDelta {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, disk.SuperblockSize)
	if _, err := f.ReadAt(b, disk.SuperblockOffset); err != nil {
		return fmt.Errorf("%s is not an ext4 image (too short for a superblock): make one with `rungv volume create`: %w", path, err)
	}
	if _, err := disk.ParseSuperblockHeader(b); err != nil {
		return fmt.Errorf("%s is not an ext4 image: %w (make one with `rungv volume create`)", path, err)
	}
	return nil
}

// Flatten writes the image an episode represents to out as a standalone
// sparse image. A reflinked (plain image) episode is copied.
func Flatten(episode, out string) error {
	isDelta, err := blockdev.IsDelta(episode)
	if err != nil {
		return err
	}
	if !isDelta {
		return blockdev.CopyImage(episode, out)
	}
	d, err := blockdev.OpenDelta(episode, "", true)
	if err != nil {
		return err
	}
	defer d.Close()
	return blockdev.Flatten(d, out)
}
