package ext4lite

import (
	"container/list"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// inode is a cached inode. raw is authoritative while cached; dirty inodes
// are written into their inode table block at the end of each change.
type inode struct {
	ino   Ino
	raw   disk.Inode
	dirty bool
	// refs counts open references the user holds (IncRef); an unlinked
	// inode with references lives on the orphan list until the last one
	// goes.
	refs int
	// linkable says the inode was made by CreateTmpfile and may get its
	// first name from Link.
	linkable bool

	// loadMu guards the lazily loaded fields below when the filesystem is
	// only read-locked.
	loadMu sync.Mutex
	fmap   *fileMap
	dir    *dirIndex

	lru *list.Element
}

func (n *inode) isDir() bool { return n.raw.IsDir() }

// inodeCache holds inodes; clean ones without references are evicted
// least recently used first, never during a change.
type inodeCache struct {
	limit int
	m     map[Ino]*inode
	lru   list.List
}

// getInode returns in-use inode ino.
func (fs *FS) getInode(ino Ino) (*inode, error) {
	if ino == 0 || ino > fs.geo.inodesCount {
		return nil, corruptf("inode number %d out of range", ino)
	}
	fs.inodeMu.Lock()
	if n, ok := fs.icache.m[ino]; ok {
		if n.lru != nil {
			fs.icache.lru.MoveToFront(n.lru)
		}
		fs.inodeMu.Unlock()
		return n, nil
	}
	fs.inodeMu.Unlock()

	inUse, err := fs.inodeInUse(ino)
	if err != nil {
		return nil, err
	}
	if !inUse {
		return nil, fmt.Errorf("inode %d is not in use: %w", ino, unix.ESTALE)
	}
	raw, err := fs.readRawInode(ino)
	if err != nil {
		return nil, err
	}
	if raw.Links() == 0 && !fs.isOrphan(ino) {
		return nil, corruptf("inode %d is referenced but deleted (no links)", ino)
	}
	if err := disk.CheckInode(raw, ino); err != nil {
		return nil, err
	}
	if err := fs.checkSize(raw, ino); err != nil {
		return nil, err
	}
	n := &inode{ino: ino, raw: raw}

	fs.inodeMu.Lock()
	defer fs.inodeMu.Unlock()
	if old, ok := fs.icache.m[ino]; ok {
		return old, nil // another reader loaded it meanwhile
	}
	fs.icache.m[ino] = n
	n.lru = fs.icache.lru.PushFront(n)
	if !fs.writing() {
		fs.evictInodesLocked()
	}
	return n, nil
}

// inodeInUse reports whether inode ino is marked in use, without changing
// anything (it runs under the read lock).
func (fs *FS) inodeInUse(ino Ino) (bool, error) {
	grp, idx := fs.geo.groupOfInode(ino)
	d := fs.groups[grp].desc
	if d.Flags()&disk.BGInodeUninit != 0 && fs.sb.HasGroupCsum() {
		return false, nil
	}
	b, err := fs.bread(d.InodeBitmap())
	if err != nil {
		return false, err
	}
	return testBit(b.data, idx), nil
}

// readRawInode reads inode ino from its table and checks its checksum.
func (fs *FS) readRawInode(ino Ino) (disk.Inode, error) {
	blk, off := fs.inodeLocation(ino)
	b, err := fs.bread(blk)
	if err != nil {
		return nil, err
	}
	raw := disk.Inode(append([]byte(nil), b.data[off:off+fs.geo.inodeSize]...))
	if fs.verify && !raw.IsZero() && !raw.VerifyChecksum(fs.seed, ino) {
		return nil, corruptf("inode %d checksum %#08x, computed %#08x", ino, raw.Checksum(), raw.ComputeChecksum(fs.seed, ino))
	}
	return raw, nil
}

// inodeLocation returns the inode table block and offset of inode ino.
func (fs *FS) inodeLocation(ino Ino) (uint64, int) {
	grp, idx := fs.geo.groupOfInode(ino)
	byteOff := uint64(idx) * uint64(fs.geo.inodeSize)
	return fs.groups[grp].desc.InodeTable() + byteOff>>fs.geo.blockBits, int(byteOff & uint64(fs.geo.blockSize-1))
}

// cacheNewInode adds a freshly allocated inode to the cache, dirty.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) cacheNewInode(n *inode) {
	fs.inodeMu.Lock()
	if old, ok := fs.icache.m[n.ino]; ok && old.lru != nil {
		fs.icache.lru.Remove(old.lru)
	}
	fs.icache.m[n.ino] = n
	fs.inodeMu.Unlock()
	fs.markDirty(n)
}

// markDirty schedules n for writing at the end of the change.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) markDirty(n *inode) {
	fs.op.mutated = true
	if n.dirty {
		return
	}
	n.dirty = true
	fs.inodeMu.Lock()
	if n.lru != nil {
		fs.icache.lru.Remove(n.lru)
		n.lru = nil
	}
	fs.inodeMu.Unlock()
	fs.dirtyInodes = append(fs.dirtyInodes, n)
}

// flushInodes writes dirty inodes, with checksums, into their tables.
func (fs *FS) flushInodes() error {
	for _, n := range fs.dirtyInodes {
		if fs.csum {
			n.raw.UpdateChecksum(fs.seed, n.ino)
		}
		blk, off := fs.inodeLocation(n.ino)
		b, err := fs.bread(blk)
		if err != nil {
			return err
		}
		copy(fs.modify(b)[off:], n.raw)
		n.dirty = false
		fs.inodeMu.Lock()
		if fs.icache.m[n.ino] == n && n.lru == nil && n.refs == 0 {
			n.lru = fs.icache.lru.PushFront(n)
		}
		fs.inodeMu.Unlock()
	}
	fs.dirtyInodes = fs.dirtyInodes[:0]
	return nil
}

// forgetInode drops a deleted inode from the cache.
//
// Preconditions: fs.mu is held exclusively; n is clean or in dirtyInodes.
func (fs *FS) forgetInode(n *inode) {
	fs.inodeMu.Lock()
	defer fs.inodeMu.Unlock()
	if n.lru != nil {
		fs.icache.lru.Remove(n.lru)
		n.lru = nil
	}
	if fs.icache.m[n.ino] == n {
		delete(fs.icache.m, n.ino)
	}
	n.fmap, n.dir = nil, nil
}

// evictInodesLocked drops clean, unreferenced inodes above the limit.
//
// Preconditions: fs.inodeMu is held; no change is in progress.
func (fs *FS) evictInodesLocked() {
	for fs.icache.lru.Len() > fs.icache.limit {
		e := fs.icache.lru.Back()
		n := e.Value.(*inode)
		fs.icache.lru.Remove(e)
		n.lru = nil
		delete(fs.icache.m, n.ino)
	}
}

// writing reports whether a change is in progress. Caches are not evicted
// then: the change may hold pointers to cached objects it will modify.
func (fs *FS) writing() bool { return fs.inChange }

// inodeSeed is the per-inode checksum seed.
func (fs *FS) inodeSeed(n *inode) uint32 {
	return disk.InodeCsumSeed(fs.seed, n.ino, n.raw.Generation())
}

// setSectors sets i_blocks from a count of filesystem blocks.
func (fs *FS) setBlocks(n *inode, blocks uint64) {
	n.raw.SetSectors(blocks << (fs.geo.blockBits - 9))
}

// blocksOf returns i_blocks in filesystem blocks.
func (fs *FS) blocksOf(n *inode) uint64 {
	return n.raw.Sectors(fs.geo.blockSize) >> (fs.geo.blockBits - 9)
}

// addBlocks adjusts i_blocks by delta filesystem blocks.
func (fs *FS) addBlocks(n *inode, delta int64) {
	fs.setBlocks(n, uint64(int64(fs.blocksOf(n))+delta))
	fs.markDirty(n)
}

// checkSize refuses an i_size that no file of raw's format can have, as
// e2fsck does: negative as a signed number (what the guest's lseek and
// stat would get), or past the last byte 32-bit logical block numbers
// reach in an extent-mapped file, or the indirect blocks in a block-mapped
// one.
func (fs *FS) checkSize(raw disk.Inode, ino Ino) error {
	size := raw.Size()
	if int64(size) < 0 {
		return corruptf("inode %d: i_size %#x is negative as a signed 64-bit number", ino, size)
	}
	if limit := fs.maxSizeOf(raw); size > limit {
		return corruptf("inode %d: i_size %d is past the largest size of its format, %d", ino, size, limit)
	}
	return nil
}

// maxSizeOf is the largest i_size e2fsck accepts for raw's format.
func (fs *FS) maxSizeOf(raw disk.Inode) uint64 {
	bits := fs.geo.blockBits
	if raw.Flags()&disk.FlagExtents != 0 {
		return 1<<(32+bits) - 1
	}
	per := uint64(1) << (bits - 2) // block numbers per indirect block
	return (directBlocks + per + per*per + per*per*per) << bits
}
