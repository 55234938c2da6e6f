package ext4lite

import (
	"math/bits"

	"golang.org/x/sys/unix"
)

// goodRun is the run length the allocator looks for before settling for
// the first free block; it keeps large writes from being sprayed over small
// holes.
const goodRun = 64

// reserveBlocks makes sure n blocks can be allocated by the change about to
// be made. Blocks freed by the running transaction only become allocatable
// when it commits, so if they are needed the transaction commits first.
//
// Preconditions: fs.mu is held exclusively; nothing changed yet in this op.
func (fs *FS) reserveBlocks(n uint64) error {
	if fs.freeBlocks >= n {
		return nil
	}
	if fs.txn.pendingFreeCount > 0 && !fs.op.mutated {
		if err := fs.commit(); err != nil {
			return err
		}
		if fs.freeBlocks >= n {
			return nil
		}
	}
	return unix.ENOSPC
}

// availableBlocks is how many blocks a change could allocate now,
// committing first if freed blocks are pending.
//
// Preconditions: as reserveBlocks.
func (fs *FS) availableBlocks(want uint64) (uint64, error) {
	if fs.freeBlocks < want && fs.txn.pendingFreeCount > 0 && !fs.op.mutated {
		if err := fs.commit(); err != nil {
			return 0, err
		}
	}
	return fs.freeBlocks, nil
}

// allocBlocks allocates a run of 1 to want contiguous blocks, looking from
// goal on. Callers reserve first, so running out here means the group
// descriptors lie.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) allocBlocks(goal uint64, want uint64) (uint64, uint64, error) {
	g := &fs.geo
	if want == 0 {
		want = 1
	}
	if goal < g.firstData || goal >= g.blocksCount {
		goal = g.firstData
	}
	first := g.groupOfBlock(goal)
	for i := range g.groups {
		grp := (first + i) % g.groups
		if fs.groups[grp].desc.FreeBlocks() == 0 {
			continue
		}
		from := uint32(0)
		if i == 0 {
			from = uint32(goal - g.groupStart(grp))
		}
		b, err := fs.blockBitmap(grp)
		if err != nil {
			return 0, 0, err
		}
		limit := g.blocksInGroup(grp)
		start, n := findRun(b.data, from, limit, uint32(min(want, uint64(limit))))
		if n == 0 && from > 0 {
			start, n = findRun(b.data, 0, from, uint32(min(want, uint64(from))))
		}
		if n == 0 {
			return 0, 0, corruptf("group %d claims %d free blocks but its bitmap has none", grp, fs.groups[grp].desc.FreeBlocks())
		}
		if uint64(n) > uint64(fs.groups[grp].desc.FreeBlocks()) {
			return 0, 0, corruptf("group %d bitmap has more free blocks than its descriptor counts", grp)
		}
		// Data written there would overwrite metadata.
		if why := fs.badBlocks(noOwner, g.groupStart(grp)+uint64(start), uint64(n)); why != "" {
			return 0, 0, corruptf("group %d's block bitmap marks as free %s", grp, why)
		}
		bm := fs.modify(b)
		for k := start; k < start+n; k++ {
			setBit(bm, k)
		}
		d := fs.groups[grp].desc
		d.SetFreeBlocks(d.FreeBlocks() - n)
		fs.groups[grp].blockBitmapDirty = true
		fs.markGroupDirty(grp)
		fs.freeBlocks -= uint64(n)
		return g.groupStart(grp) + uint64(start), uint64(n), nil
	}
	return 0, 0, corruptf("no free block although %d are counted free", fs.freeBlocks)
}

// allocBlock allocates one block near goal.
func (fs *FS) allocBlock(goal uint64) (uint64, error) {
	b, _, err := fs.allocBlocks(goal, 1)
	return b, err
}

// findRun finds free bits in bm[from:limit): the first run of at least
// min(want, goodRun) bits, else the longest run seen, capped at want.
// It returns n == 0 if every bit is set.
func findRun(bm []byte, from, limit, want uint32) (uint32, uint32) {
	good := min(want, goodRun)
	var bestStart, bestLen uint32
	for i := from; i < limit; {
		// Skip whole bytes and words of set bits quickly.
		if i%64 == 0 && i+64 <= limit {
			w := le64(bm[i/8:])
			if w == ^uint64(0) {
				i += 64
				continue
			}
			if tz := uint32(bits.TrailingZeros64(^w)); tz > 0 {
				i += tz
				continue
			}
		}
		if testBit(bm, i) {
			i++
			continue
		}
		start := i
		for i < limit && i-start < want && !testBit(bm, i) {
			i++
		}
		n := i - start
		if n >= good {
			return start, n
		}
		if n > bestLen {
			bestStart, bestLen = start, n
		}
	}
	return bestStart, bestLen
}

func le64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// freeBlocks releases n blocks from start. They stay allocated in the
// bitmaps until the running transaction commits, so neither file data nor
// metadata can land in them while the committed state still uses them.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) freeBlockRange(start, n uint64) error {
	if n == 0 {
		return nil
	}
	if start < fs.geo.firstData || start+n > fs.geo.blocksCount || start+n < start {
		return corruptf("freeing blocks %d+%d outside the filesystem", start, n)
	}
	fs.op.mutated = true
	p := &fs.txn.pendingFree
	if k := len(*p); k > 0 && (*p)[k-1].start+(*p)[k-1].n == start {
		(*p)[k-1].n += n
	} else {
		*p = append(*p, blockRange{start, n})
	}
	fs.txn.pendingFreeCount += n
	fs.forgetBlocks(start, n)
	return nil
}

// forgetBlocks calls forgetBlock for every cached block in the range.
func (fs *FS) forgetBlocks(start, n uint64) {
	fs.cacheMu.Lock()
	var hits []uint64
	if n > uint64(len(fs.cache.buffers)) {
		for blk := range fs.cache.buffers {
			if blk >= start && blk < start+n {
				hits = append(hits, blk)
			}
		}
	} else {
		for blk := start; blk < start+n; blk++ {
			if _, ok := fs.cache.buffers[blk]; ok {
				hits = append(hits, blk)
			}
		}
	}
	fs.cacheMu.Unlock()
	for _, blk := range hits {
		fs.forgetBlock(blk)
	}
}

// applyPendingFrees clears the bitmap bits of the blocks freed in the
// running transaction. Called by commit, inside the transaction.
func (fs *FS) applyPendingFrees() error {
	g := &fs.geo
	for _, r := range fs.txn.pendingFree {
		for r.n > 0 {
			grp := g.groupOfBlock(r.start)
			off := uint32(r.start - g.groupStart(grp))
			n := uint32(min(r.n, uint64(g.blocksInGroup(grp)-off)))
			b, err := fs.blockBitmap(grp)
			if err != nil {
				return err
			}
			bm := fs.modify(b)
			for k := off; k < off+n; k++ {
				if !testBit(bm, k) {
					return corruptf("block %d freed twice", g.groupStart(grp)+uint64(k))
				}
				clearBit(bm, k)
			}
			d := fs.groups[grp].desc
			d.SetFreeBlocks(d.FreeBlocks() + n)
			fs.groups[grp].blockBitmapDirty = true
			fs.markGroupDirty(grp)
			fs.freeBlocks += uint64(n)
			fs.freedGroups[grp] = struct{}{}
			r.start += uint64(n)
			r.n -= uint64(n)
		}
	}
	fs.txn.pendingFree = fs.txn.pendingFree[:0]
	fs.txn.pendingFreeCount = 0
	return nil
}
