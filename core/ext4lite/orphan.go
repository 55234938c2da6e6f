package ext4lite

import (
	"slices"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// The orphan list chains inodes that lost their last link while still open
// (or, after a crash, were being truncated): s_last_orphan is the head,
// each inode's i_dtime names the next. fs.orphans mirrors it, head first.

// isOrphan reports whether ino is on the orphan list.
func (fs *FS) isOrphan(ino Ino) bool { return slices.Contains(fs.orphans, ino) }

// addOrphan puts n at the head of the orphan list.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) addOrphan(n *inode) {
	n.raw.SetDtime(fs.sb.LastOrphan())
	fs.sb.SetLastOrphan(n.ino)
	fs.sbDirty = true
	fs.orphans = append([]Ino{n.ino}, fs.orphans...)
	fs.markDirty(n)
}

// removeOrphan unlinks n from the orphan list.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) removeOrphan(n *inode) error {
	k := slices.Index(fs.orphans, n.ino)
	if k < 0 {
		return nil
	}
	next := n.raw.Dtime()
	if k == 0 {
		fs.sb.SetLastOrphan(next)
		fs.sbDirty = true
	} else {
		prev, err := fs.getInode(fs.orphans[k-1])
		if err != nil {
			return err
		}
		prev.raw.SetDtime(next)
		fs.markDirty(prev)
	}
	n.raw.SetDtime(0)
	fs.markDirty(n)
	fs.orphans = slices.Delete(fs.orphans, k, k+1)
	return nil
}

// loadOrphans reads the orphan chain.
func (fs *FS) loadOrphans() error {
	fs.orphans = nil
	seen := make(map[Ino]bool)
	for ino := fs.sb.LastOrphan(); ino != 0; {
		if ino < fs.geo.firstIno && ino != disk.RootIno || ino > fs.geo.inodesCount || seen[ino] {
			return corruptf("orphan list holds invalid or repeated inode %d", ino)
		}
		seen[ino] = true
		fs.orphans = append(fs.orphans, ino)
		raw, err := fs.readRawInode(ino)
		if err != nil {
			return err
		}
		ino = raw.Dtime()
	}
	return nil
}

// releaseOrphans finishes what a crash interrupted: orphans without links
// are deleted, the others truncated to their size.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) releaseOrphans() error {
	for len(fs.orphans) > 0 {
		n, err := fs.getInode(fs.orphans[0])
		if err != nil {
			return err
		}
		if err := disk.CheckInode(n.raw, n.ino); err != nil {
			return err
		}
		if n.raw.Links() == 0 {
			if err := fs.deleteInode(n); err != nil {
				return err
			}
		} else {
			if err := fs.removeOrphan(n); err != nil {
				return err
			}
			if n.raw.IsReg() || n.raw.IsDir() || n.raw.IsSymlink() {
				if err := fs.truncateBlocks(n, n.raw.Size()); err != nil {
					return err
				}
			}
		}
		fs.stats.Orphans++
	}
	return nil
}
