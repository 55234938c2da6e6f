package ext4lite

import (
	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// Rename moves oldName in oldDir to newName in newDir, like renameat2(2)
// with flags RenameNoReplace, RenameExchange or RenameWhiteout. A whiteout
// left behind is a character device 0:0 owned like the renamed inode.
func (fs *FS) Rename(oldDir Ino, oldName string, newDir Ino, newName string, flags uint32) (err error) {
	if flags&^(RenameNoReplace|RenameExchange|RenameWhiteout) != 0 ||
		flags&RenameExchange != 0 && flags&(RenameNoReplace|RenameWhiteout) != 0 {
		return unix.EINVAL
	}
	if err := checkName(oldName); err != nil {
		return err
	}
	if err := checkName(newName); err != nil {
		return err
	}
	if err := fs.lockWrite(); err != nil {
		return err
	}
	defer fs.unlockWrite(&err)
	sp, sd, err := fs.parentDir(oldDir)
	if err != nil {
		return err
	}
	dp, dd, err := fs.parentDir(newDir)
	if err != nil {
		return err
	}
	sslot, ok := sd.names[oldName]
	if !ok {
		return unix.ENOENT
	}
	dslot, dExists := dd.names[newName]
	exchange := flags&RenameExchange != 0
	// The checks come in the order Linux makes them.
	if exchange && !dExists {
		return unix.ENOENT
	}
	if flags&RenameNoReplace != 0 && dExists {
		return unix.EEXIST
	}
	src, err := fs.getInode(sslot.ino)
	if err != nil {
		return err
	}
	var dst *inode
	if dExists {
		if dst, err = fs.getInode(dslot.ino); err != nil {
			return err
		}
	}
	if src.isDir() && oldDir != newDir {
		if err := fs.checkNotUnder(newDir, src.ino); err != nil {
			return err
		}
	}
	if dst != nil && dst.isDir() && oldDir != newDir {
		if err := fs.checkNotUnder(oldDir, dst.ino); err != nil {
			if exchange {
				return err
			}
			return unix.ENOTEMPTY
		}
	}
	if dExists && dslot.ino == sslot.ino {
		return nil // two names of one inode: nothing to do
	}
	if !exchange && dExists {
		switch {
		case src.isDir() && !dst.isDir():
			return unix.ENOTDIR
		case !src.isDir() && dst.isDir():
			return unix.EISDIR
		case dst.isDir():
			di, err := fs.dirIndexOf(dst)
			if err != nil {
				return err
			}
			if di.entries > 0 {
				return unix.ENOTEMPTY
			}
		}
	}
	if !fs.dirNlink && src.isDir() && oldDir != newDir && dd.subdirs+2 >= disk.LinkMax {
		return unix.EMLINK
	}
	if !dExists {
		if err := fs.reserveBlocks(fs.dirAddReserve(dp)); err != nil {
			return err
		}
	}
	if flags&RenameWhiteout != 0 && fs.freeInodes == 0 {
		return unix.ENOSPC
	}
	var srcIdx, dstIdx *dirIndex
	if src.isDir() {
		if srcIdx, err = fs.dirIndexOf(src); err != nil {
			return err
		}
	}
	if dst != nil && dst.isDir() {
		if dstIdx, err = fs.dirIndexOf(dst); err != nil {
			return err
		}
	}
	now := fs.nowStamp()
	stamp := func(ns ...*inode) {
		for _, n := range ns {
			if n != nil {
				n.raw.SetCtime(now)
				fs.markDirty(n)
			}
		}
	}
	sp.raw.SetMtime(now)
	dp.raw.SetMtime(now)
	stamp(sp, dp, src, dst)

	ft := func(n *inode) uint8 { return disk.FileTypeOfMode(n.raw.Mode()) }
	if exchange {
		if err := fs.dirSet(sp, sd, oldName, dst.ino, ft(dst)); err != nil {
			return err
		}
		if err := fs.dirSet(dp, dd, newName, src.ino, ft(src)); err != nil {
			return err
		}
		if oldDir != newDir {
			if srcIdx != nil {
				if err := fs.dirSet(src, srcIdx, "..", newDir, disk.FtDir); err != nil {
					return err
				}
			}
			if dstIdx != nil {
				if err := fs.dirSet(dst, dstIdx, "..", oldDir, disk.FtDir); err != nil {
					return err
				}
			}
		}
		fs.syncDirLinks(sp, sd)
		fs.syncDirLinks(dp, dd)
		return nil
	}
	if dExists {
		if err := fs.dirSet(dp, dd, newName, src.ino, ft(src)); err != nil {
			return err
		}
		if dst.isDir() {
			dst.raw.SetLinks(1)
		}
		if err := fs.dropLink(dst); err != nil {
			return err
		}
	} else if err := fs.dirAdd(dp, dd, newName, src.ino, ft(src)); err != nil {
		return err
	}
	if flags&RenameWhiteout != 0 {
		wh, err := fs.newInode(sp, disk.ModeChr, Owner{UID: src.raw.UID(), GID: src.raw.GID()})
		if err != nil {
			return err
		}
		wh.raw.SetRdev(0, 0)
		if err := fs.dirSet(sp, sd, oldName, wh.ino, disk.FtChr); err != nil {
			return err
		}
	} else if err := fs.dirRemove(sp, sd, oldName); err != nil {
		return err
	}
	if srcIdx != nil && oldDir != newDir {
		if err := fs.dirSet(src, srcIdx, "..", newDir, disk.FtDir); err != nil {
			return err
		}
	}
	fs.syncDirLinks(sp, sd)
	fs.syncDirLinks(dp, dd)
	return nil
}

// checkNotUnder fails with EINVAL if directory dir is inode anc or lies
// below it: a directory cannot move into itself.
func (fs *FS) checkNotUnder(dir, anc Ino) error {
	for steps := uint32(0); ; steps++ {
		if dir == anc {
			return unix.EINVAL
		}
		if dir == RootIno {
			return nil
		}
		if steps > fs.geo.inodesCount {
			return corruptf("directory tree has a loop above inode %d", dir)
		}
		n, err := fs.getInode(dir)
		if err != nil {
			return err
		}
		d, err := fs.dirIndexOf(n)
		if err != nil {
			return err
		}
		dir = d.names[".."].ino
	}
}
