package ext4lite

import (
	"bytes"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// Setxattr flags as in Linux.
const (
	XattrCreate  = 1
	XattrReplace = 2
)

// maxXattrValue is Linux's XATTR_SIZE_MAX.
const maxXattrValue = 65536

// loadXattrs returns n's attributes: those in the inode, and those in its
// attribute block.
func (fs *FS) loadXattrs(n *inode) (inInode, inBlock []disk.Xattr, err error) {
	inInode, err = disk.ParseInodeXattrs(n.raw)
	if err != nil {
		return nil, nil, fmt.Errorf("inode %d: %w", n.ino, err)
	}
	blk := n.raw.FileACL()
	if blk == 0 {
		return inInode, nil, nil
	}
	if why := fs.badBlocks(n.ino, blk, 1); why != "" {
		return nil, nil, corruptf("inode %d: the attribute block is at %s", n.ino, why)
	}
	b, err := fs.bread(blk)
	if err != nil {
		return nil, nil, err
	}
	_, inBlock, err = disk.ParseXattrBlock(b.data, blk, fs.seed, fs.verify)
	if err != nil {
		return nil, nil, fmt.Errorf("inode %d: %w", n.ino, err)
	}
	return inInode, inBlock, nil
}

// GetXattr returns the value of attribute name; ENODATA if it has none.
func (fs *FS) GetXattr(ino Ino, name string) (value []byte, err error) {
	index, suffix, err := disk.SplitXattrName(name)
	if err != nil {
		return nil, err
	}
	if err := fs.lockRead(); err != nil {
		return nil, err
	}
	defer fs.unlockRead(&err)
	n, err := fs.getInode(ino)
	if err != nil {
		return nil, err
	}
	a, b, err := fs.loadXattrs(n)
	if err != nil {
		return nil, err
	}
	for _, x := range append(a, b...) {
		if x.Index == index && x.Name == suffix {
			if isACLName(index) {
				return aclFromDisk(x.Value)
			}
			return x.Value, nil
		}
	}
	return nil, unix.ENODATA
}

// ListXattr returns the names of n's attributes.
func (fs *FS) ListXattr(ino Ino) (names []string, err error) {
	if err := fs.lockRead(); err != nil {
		return nil, err
	}
	defer fs.unlockRead(&err)
	n, err := fs.getInode(ino)
	if err != nil {
		return nil, err
	}
	a, b, err := fs.loadXattrs(n)
	if err != nil {
		return nil, err
	}
	for _, x := range append(a, b...) {
		if x.Index == disk.InlineDataXattrIndex && x.Name == disk.InlineDataXattrNameStr {
			continue
		}
		names = append(names, x.FullName())
	}
	return names, nil
}

// SetXattr sets attribute name; flags may be XattrCreate or XattrReplace.
func (fs *FS) SetXattr(ino Ino, name string, value []byte, flags int) (err error) {
	index, suffix, err := disk.SplitXattrName(name)
	if err != nil {
		return err
	}
	switch {
	case len(suffix) > disk.MaxNameLen || suffix == "" && !isACLName(index):
		return unix.ERANGE
	case len(value) > maxXattrValue:
		return unix.E2BIG
	}
	if isACLName(index) {
		if len(value) == 0 {
			return fs.RemoveXattr(ino, name)
		}
		if value, err = aclToDisk(value); err != nil {
			return err
		}
	}
	if err := fs.lockWrite(); err != nil {
		return err
	}
	defer fs.unlockWrite(&err)
	return fs.changeXattr(ino, index, suffix, slices.Clone(value), flags, false)
}

// RemoveXattr removes attribute name; ENODATA if it has none.
func (fs *FS) RemoveXattr(ino Ino, name string) (err error) {
	index, suffix, err := disk.SplitXattrName(name)
	if err != nil {
		return err
	}
	if err := fs.lockWrite(); err != nil {
		return err
	}
	defer fs.unlockWrite(&err)
	return fs.changeXattr(ino, index, suffix, nil, XattrReplace, true)
}

// changeXattr sets or removes one attribute and lays the attributes out
// again: as many as fit in the inode, the rest in an attribute block. A
// block shared with other inodes is never written; the inode gets a copy.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) changeXattr(ino Ino, index uint8, name string, value []byte, flags int, remove bool) error {
	n, err := fs.getInode(ino)
	if err != nil {
		return err
	}
	if n.raw.Flags()&disk.FlagInlineData != 0 {
		return fmt.Errorf("inode %d keeps data inline: %w", ino, unix.EOPNOTSUPP)
	}
	a, b, err := fs.loadXattrs(n)
	if err != nil {
		return err
	}
	all := append(slices.Clone(a), b...)
	i := slices.IndexFunc(all, func(x disk.Xattr) bool { return x.Index == index && x.Name == name })
	switch {
	case i >= 0 && flags&XattrCreate != 0:
		return unix.EEXIST
	case i < 0 && (flags&XattrReplace != 0 || remove):
		return unix.ENODATA
	case remove:
		all = slices.Delete(all, i, i+1)
	case i >= 0:
		all[i].Value = value
	default:
		all = append(all, disk.Xattr{Index: index, Name: name, Value: value})
	}
	disk.SortXattrs(all)
	var inInode, inBlock []disk.Xattr
	room := disk.InodeXattrSpace(n.raw) - 4
	for _, x := range all {
		sz := disk.XattrSpace([]disk.Xattr{x})
		if sz <= room {
			inInode = append(inInode, x)
			room -= sz
			continue
		}
		inBlock = append(inBlock, x)
	}
	if !disk.XattrBlockFits(inBlock, fs.geo.blockSize) {
		return unix.ENOSPC
	}
	oldBlock := n.raw.FileACL()
	sameBlock := oldBlock != 0 && xattrsEqual(inBlock, b)
	if !sameBlock && len(inBlock) > 0 {
		if err := fs.reserveBlocks(1); err != nil {
			return err
		}
	}
	disk.MarshalInodeXattrs(n.raw, inInode)
	n.raw.SetCtime(fs.nowStamp())
	fs.markDirty(n)
	if sameBlock {
		return nil
	}
	return fs.writeXattrBlock(n, inBlock)
}

func xattrsEqual(a, b []disk.Xattr) bool {
	if len(a) != len(b) {
		return false
	}
	b = slices.Clone(b)
	disk.SortXattrs(b)
	for i := range a {
		if a[i].Index != b[i].Index || a[i].Name != b[i].Name || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// writeXattrBlock gives n an attribute block holding xs (none if xs is
// empty), writing its own block in place and copying a shared one.
func (fs *FS) writeXattrBlock(n *inode, xs []disk.Xattr) error {
	blk := n.raw.FileACL()
	if len(xs) == 0 {
		return fs.releaseXattrBlock(n)
	}
	if blk != 0 {
		b, err := fs.bread(blk)
		if err != nil {
			return err
		}
		h, _, err := disk.ParseXattrBlock(b.data, blk, fs.seed, fs.verify)
		if err != nil {
			return err
		}
		if h.Refcount <= 1 {
			disk.MarshalXattrBlock(fs.modify(b), blk, fs.seed, 1, xs, fs.csum)
			return nil
		}
		if err := fs.releaseXattrBlock(n); err != nil {
			return err
		}
	}
	nb, err := fs.allocBlock(fs.inodeGoal(n.ino))
	if err != nil {
		return err
	}
	b := fs.bnew(nb)
	disk.MarshalXattrBlock(b.data, nb, fs.seed, 1, xs, fs.csum)
	n.raw.SetFileACL(nb)
	fs.addBlocks(n, 1)
	return nil
}

// releaseXattrBlock drops n's reference to its attribute block, freeing the
// block with the last reference.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) releaseXattrBlock(n *inode) error {
	blk := n.raw.FileACL()
	if blk == 0 {
		return nil
	}
	if why := fs.badBlocks(n.ino, blk, 1); why != "" {
		return corruptf("inode %d: the attribute block is at %s", n.ino, why)
	}
	b, err := fs.bread(blk)
	if err != nil {
		return err
	}
	h, _, err := disk.ParseXattrBlock(b.data, blk, fs.seed, fs.verify)
	if err != nil {
		return err
	}
	if h.Refcount > 1 {
		disk.SetXattrBlockRefcount(fs.modify(b), blk, fs.seed, h.Refcount-1, fs.csum)
	} else if err := fs.freeBlockRange(blk, 1); err != nil {
		return err
	}
	n.raw.SetFileACL(0)
	fs.addBlocks(n, -1)
	return nil
}
