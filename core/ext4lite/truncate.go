package ext4lite

import (
	"fmt"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// zeroTail zeroes [from, to) of the block holding from, if that block is
// written: bytes past the end of a file must read as zeros once it grows.
func (fs *FS) zeroTail(n *inode, m *fileMap, from, to int64) error {
	bs := int64(fs.geo.blockSize)
	in := from % bs
	if in == 0 {
		return nil
	}
	mp := m.lookup(uint64(from/bs), 1)
	if mp.physical == 0 || mp.uninit {
		return nil
	}
	end := min(bs, in+(to-from))
	return fs.writeDataAt(mp.physical, in, make([]byte, end-in))
}

// truncateBlocks frees n's blocks past size bytes and zeroes the rest of
// the last partial block.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) truncateBlocks(n *inode, size uint64) error {
	if !n.raw.IsReg() && !n.raw.IsDir() && !n.raw.IsSymlink() {
		return nil
	}
	if n.raw.Flags()&disk.FlagInlineData != 0 {
		return fmt.Errorf("inode %d keeps its data inline: %w", n.ino, unix.EOPNOTSUPP)
	}
	m, err := fs.fileMapOf(n)
	if err != nil {
		return err
	}
	bs := uint64(fs.geo.blockSize)
	size = min(size, uint64(fs.maxFileSize())) // a corrupt orphan's size
	first := (size + bs - 1) / bs
	if m.blockmap {
		if size != 0 {
			if err := fs.convertToExtents(n, m); err != nil {
				return err
			}
		} else {
			ind := int64(len(m.indirect))
			if err := fs.freeTree(m); err != nil {
				return err
			}
			fs.addBlocks(n, -ind)
			clear(n.raw.IBlock())
			if n.raw.Flags()&disk.FlagExtents == 0 && fs.sb.HasIncompat(disk.IncompatExtents) {
				n.raw.SetFlags(n.raw.Flags() | disk.FlagExtents)
				emptyExtentRoot(n.raw)
			}
			m.blockmap = false
			m.packed = false
			m.dirtyFrom = 0
		}
	}
	freed := m.remove(first, disk.MaxLogicalBlock)
	var count int64
	for _, r := range freed {
		if err := fs.freeBlockRange(r.start, r.n); err != nil {
			return err
		}
		count += int64(r.n)
	}
	if n.raw.Flags()&disk.FlagExtents != 0 {
		if err := fs.writeFileMap(n, m); err != nil {
			return err
		}
	}
	if count > 0 {
		fs.addBlocks(n, -count)
	}
	if size%bs != 0 {
		if err := fs.zeroTail(n, m, int64(size), int64(first*bs)); err != nil {
			return err
		}
	}
	return nil
}

// Truncate sets the size of regular file ino.
func (fs *FS) Truncate(ino Ino, size int64) error {
	return fs.updateInode(ino, func(n *inode) error { return fs.setSize(n, size) })
}

// setSize changes a regular file's size and stamps mtime and ctime.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) setSize(n *inode, size int64) error {
	if err := fs.checkWritableFile(n); err != nil {
		return err
	}
	if size < 0 {
		return unix.EINVAL
	}
	if size > fs.maxFileSize() {
		return unix.EFBIG
	}
	m, err := fs.fileMapOf(n)
	if err != nil {
		return err
	}
	old := int64(n.raw.Size())
	if m.blockmap {
		if err := fs.reserveBlocks(m.treeBlocks() + treeSlack(0)); err != nil {
			return err
		}
	}
	switch {
	case size < old:
		// Cutting off a tail never splits an extent, so the tree cannot
		// grow: shrinking works on a full filesystem.
		if err := fs.truncateBlocks(n, uint64(size)); err != nil {
			return err
		}
	case size > old:
		if err := fs.convertToExtents(n, m); err != nil {
			return err
		}
		if err := fs.zeroTail(n, m, old, size); err != nil {
			return err
		}
	}
	n.raw.SetSize(uint64(size))
	now := fs.nowStamp()
	n.raw.SetMtime(now)
	n.raw.SetCtime(now)
	fs.markDirty(n)
	return nil
}
