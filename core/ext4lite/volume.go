package ext4lite

import (
	"z.gfire.dev/gvx/core/ext4lite/blockdev"
)

// Clone makes episode a writable copy of the image golden in O(1): a
// reflink where the host filesystem supports FICLONE, a copy-on-write delta
// over the read-only golden otherwise. Open the episode with OpenVolume.
func Clone(golden, episode string) (blockdev.CloneMethod, error) {
	return blockdev.Clone(golden, episode)
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
