package ext4lite

import (
	"container/list"
	"fmt"
)

// buffer is a cached metadata block.
//
// A buffer moves through the journal like this: modify() makes data
// writable and puts the buffer into the running transaction; commit
// journals a snapshot of data and keeps it as committed until the
// checkpoint writes it to its home location. data and committed share
// memory until the next modify() copies data.
type buffer struct {
	blk  uint64
	data []byte

	// running is set while the buffer belongs to the running transaction.
	running bool
	// committed is the journaled content not yet checkpointed, or nil.
	committed []byte
	// shared says data aliases committed and must be copied before the
	// next change.
	shared bool
	// freed says the block was freed in the running transaction: it must
	// not be journaled, and its buffer goes away at commit.
	freed bool

	lru *list.Element
}

// pinned reports whether the buffer must stay cached.
func (b *buffer) pinned() bool { return b.running || b.committed != nil || b.freed }

// blockCache caches metadata blocks. Its own mutex makes it usable from
// readers holding FS.mu shared; the journal state of buffers is only changed
// with FS.mu held exclusively.
type blockCache struct {
	limit   int
	buffers map[uint64]*buffer
	lru     list.List // clean, unpinned buffers; front is most recent
}

func (c *blockCache) init(limit int) {
	c.limit = limit
	c.buffers = make(map[uint64]*buffer)
}

// bread returns the buffer of metadata block blk, reading it if needed.
func (fs *FS) bread(blk uint64) (*buffer, error) {
	if blk >= fs.geo.blocksCount {
		return nil, corruptf("metadata block %d beyond the filesystem end %d", blk, fs.geo.blocksCount)
	}
	fs.cacheMu.Lock()
	defer fs.cacheMu.Unlock()
	if b, ok := fs.cache.buffers[blk]; ok {
		if b.lru != nil {
			fs.cache.lru.MoveToFront(b.lru)
		}
		return b, nil
	}
	b := &buffer{blk: blk, data: make([]byte, fs.geo.blockSize)}
	if err := fs.readBlocks(blk, b.data); err != nil {
		return nil, err
	}
	fs.cache.buffers[blk] = b
	b.lru = fs.cache.lru.PushFront(b)
	if !fs.writing() {
		fs.evictLocked()
	}
	return b, nil
}

// bnew returns a zeroed buffer for newly allocated metadata block blk,
// already part of the running transaction. The old contents are not read.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) bnew(blk uint64) *buffer {
	fs.cacheMu.Lock()
	defer fs.cacheMu.Unlock()
	b, ok := fs.cache.buffers[blk]
	if !ok {
		b = &buffer{blk: blk}
		fs.cache.buffers[blk] = b
	}
	if b.lru != nil {
		fs.cache.lru.Remove(b.lru)
		b.lru = nil
	}
	if b.shared || b.data == nil {
		b.data = make([]byte, fs.geo.blockSize)
		b.shared = false
	} else {
		clear(b.data)
	}
	b.freed = false
	fs.joinRunning(b)
	return b
}

// modify makes b's data writable in the running transaction and returns it.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) modify(b *buffer) []byte {
	if b.freed {
		// Only a corrupt image (a block claimed twice) gets here. Fail the
		// filesystem and let the caller scribble on a copy.
		fs.opFail(corruptf("block %d modified after it was freed (cross-linked blocks?)", b.blk))
		return append([]byte(nil), b.data...)
	}
	if b.shared {
		b.data = append([]byte(nil), b.data...)
		b.shared = false
	}
	if !b.running {
		fs.cacheMu.Lock()
		if b.lru != nil {
			fs.cache.lru.Remove(b.lru)
			b.lru = nil
		}
		fs.cacheMu.Unlock()
		fs.joinRunning(b)
	}
	fs.op.mutated = true
	return b.data
}

// joinRunning adds b to the running transaction.
func (fs *FS) joinRunning(b *buffer) {
	if !b.running {
		b.running = true
		fs.txn.buffers = append(fs.txn.buffers, b)
	}
	fs.op.mutated = true
}

// forgetBlock is called when block blk is freed: a cached buffer for it must
// not be journaled or checkpointed any more once the free commits.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) forgetBlock(blk uint64) {
	fs.cacheMu.Lock()
	defer fs.cacheMu.Unlock()
	b, ok := fs.cache.buffers[blk]
	if !ok {
		return
	}
	if !b.running && b.committed == nil {
		fs.dropLocked(b)
		return
	}
	b.freed = true
	if !b.running {
		// Keep the committed copy for a checkpoint that may run before
		// this free commits; commit drops it.
		b.running = true
		fs.txn.buffers = append(fs.txn.buffers, b)
	}
}

// unpin returns a buffer that left the journal to the LRU list.
//
// Preconditions: fs.cacheMu is held.
func (fs *FS) unpinLocked(b *buffer) {
	if !b.pinned() && b.lru == nil {
		b.lru = fs.cache.lru.PushFront(b)
	}
}

func (fs *FS) dropLocked(b *buffer) {
	if b.lru != nil {
		fs.cache.lru.Remove(b.lru)
		b.lru = nil
	}
	delete(fs.cache.buffers, b.blk)
}

// evictLocked drops least recently used clean buffers above the limit.
//
// Preconditions: fs.cacheMu is held.
func (fs *FS) evictLocked() {
	for fs.cache.lru.Len() > fs.cache.limit {
		e := fs.cache.lru.Back()
		b := e.Value.(*buffer)
		fs.cache.lru.Remove(e)
		b.lru = nil
		delete(fs.cache.buffers, b.blk)
	}
}

// readBlocks reads len(p)/blockSize blocks starting at blk from the device
// (and, in a read-only open that replayed its journal, the overlay).
func (fs *FS) readBlocks(blk uint64, p []byte) error {
	if _, err := fs.dev.ReadAt(p, int64(blk)<<fs.geo.blockBits); err != nil {
		return fmt.Errorf("ext4lite: read block %d: %w", blk, ioError(err))
	}
	if len(fs.overlay) > 0 {
		bs := fs.geo.blockSize
		for k := 0; k*bs < len(p); k++ {
			if data, ok := fs.overlay[blk+uint64(k)]; ok {
				copy(p[k*bs:], data)
			}
		}
	}
	return nil
}

// writeBlocks writes p to the device at block blk.
func (fs *FS) writeBlocks(blk uint64, p []byte) error {
	if _, err := fs.dev.WriteAt(p, int64(blk)<<fs.geo.blockBits); err != nil {
		return fmt.Errorf("ext4lite: write block %d: %w", blk, ioError(err))
	}
	return nil
}
