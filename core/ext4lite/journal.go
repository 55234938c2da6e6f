package ext4lite

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"

	"z.gfire.dev/gvx/core/ext4lite/disk"
	"z.gfire.dev/gvx/core/ext4lite/jbd2"
)

// journalLog maps journal blocks to device blocks through the journal
// inode's extents. Journal blocks never go through the block cache.
type journalLog struct {
	fs   *FS
	exts []disk.Extent
}

var _ jbd2.Log = (*journalLog)(nil)

func (l *journalLog) locate(n uint32) (uint64, error) {
	i := sort.Search(len(l.exts), func(i int) bool { return l.exts[i].End() > uint64(n) })
	if i == len(l.exts) || uint64(l.exts[i].Logical) > uint64(n) || l.exts[i].Uninit {
		return 0, corruptf("journal block %d is not mapped", n)
	}
	return l.exts[i].Physical + uint64(n-l.exts[i].Logical), nil
}

// ReadBlock implements jbd2.Log.ReadBlock.
func (l *journalLog) ReadBlock(n uint32, p []byte) error {
	blk, err := l.locate(n)
	if err != nil {
		return err
	}
	return l.fs.readBlocks(blk, p)
}

// WriteBlock implements jbd2.Log.WriteBlock, in one device write per
// journal extent.
func (l *journalLog) WriteBlock(n uint32, p []byte) error {
	bs := l.fs.geo.blockSize
	for len(p) > 0 {
		blk, err := l.locate(n)
		if err != nil {
			return err
		}
		i := sort.Search(len(l.exts), func(i int) bool { return l.exts[i].End() > uint64(n) })
		run := int(l.exts[i].End() - uint64(n))
		k := min(run, len(p)/bs)
		if err := l.fs.writeBlocks(blk, p[:k*bs]); err != nil {
			return err
		}
		l.fs.stats.JournalBlocks += k
		n += uint32(k)
		p = p[k*bs:]
	}
	return nil
}

// openJournal finds the journal and its superblock.
func (fs *FS) openJournal() error {
	jino := fs.sb.JournalInum()
	if jino == 0 && fs.sb.JournalDev() != 0 {
		return fmt.Errorf("%w: the filesystem's journal is on another device (%#x), which ext4lite cannot use: give it an internal journal with `tune2fs -O ^has_journal` then `tune2fs -j`, or make a volume with `rungv volume create`", ErrUnsupported, fs.sb.JournalDev())
	}
	if jino == 0 || jino > fs.geo.inodesCount {
		return corruptf("has_journal is set but the journal inode is %d", jino)
	}
	n, err := fs.getInode(jino)
	if err != nil {
		return fmt.Errorf("journal inode: %w", err)
	}
	m, err := fs.fileMapOf(n)
	if err != nil {
		return fmt.Errorf("journal inode: %w", err)
	}
	fs.addJournalZone(jino, m)
	fs.jlog = &journalLog{fs: fs, exts: m.exts}
	buf := make([]byte, fs.geo.blockSize)
	if err := fs.jlog.ReadBlock(0, buf); err != nil {
		return fmt.Errorf("journal superblock: %w", err)
	}
	jsb, err := jbd2.ParseSuperblock(buf, fs.geo.blockSize, m.mappedBlocks())
	if err != nil {
		return fmt.Errorf("journal superblock: %w", err)
	}
	fs.jsb = jsb
	return nil
}

// recoverJournal replays committed transactions if the filesystem says it
// needs recovery, onto the device or, read-only, into the overlay. It
// returns the first transaction ID to use afterwards.
func (fs *FS) recoverJournal() (uint32, error) {
	if !fs.sb.HasIncompat(disk.IncompatRecover) || fs.jsb.Start() == 0 {
		// Without needs_recovery the kernel discards whatever the log
		// holds; so do we.
		return fs.jsb.Sequence() + 1, nil
	}
	if fs.sb.HasCompat(disk.CompatFastCommit) && !fs.readOnly {
		return 0, fmt.Errorf("ext4lite: the journal needs recovery and the filesystem has fast_commit, which ext4lite cannot replay: mount it with Linux or run e2fsck first")
	}
	target := func(blk uint64, data []byte) error {
		if blk >= fs.geo.blocksCount {
			return corruptf("journal replays block %d beyond the filesystem end", blk)
		}
		if fs.readOnly {
			fs.overlay[blk] = slices.Clone(data)
			return nil
		}
		return fs.writeBlocks(blk, data)
	}
	info, err := jbd2.Recover(fs.jlog, fs.jsb, target)
	if err != nil {
		return 0, fmt.Errorf("ext4lite: journal recovery: %w", err)
	}
	fs.stats.Replayed = info.Replayed
	fs.stats.Revoked = info.Revoked
	if !fs.readOnly {
		if err := fs.dev.Sync(); err != nil {
			return 0, ioError(err)
		}
	}
	// Skip one ID, as the kernel does, so stale commit blocks left in the
	// log can never pass for the next transaction.
	return info.NextSequence + 1, nil
}

// superWithRecover returns a copy of the superblock's block with
// needs_recovery set or cleared and the checksum updated.
func (fs *FS) superWithRecover(block []byte, on bool) []byte {
	out := slices.Clone(block)
	var sb disk.Superblock
	copy(sb[:], out[fs.geo.sbOffset:])
	inc := sb.FeatureIncompat() &^ disk.IncompatRecover
	if on {
		inc |= disk.IncompatRecover
	}
	sb.SetFeatureIncompat(inc)
	sb.UpdateChecksum()
	copy(out[fs.geo.sbOffset:], sb[:])
	return out
}

// setRecoverHome writes the on-disk superblock with needs_recovery on or
// off, leaving the rest as last written home.
func (fs *FS) setRecoverHome(on bool) error {
	home := fs.superWithRecover(fs.sbHome, on)
	if err := fs.writeBlocks(fs.geo.sbBlock, home); err != nil {
		return err
	}
	fs.sbHome = home
	return nil
}

// maxTxnBlocks is the running transaction size that triggers a commit.
func (fs *FS) maxTxnBlocks() int {
	if fs.journal == nil {
		return 4096
	}
	return max(fs.journal.Capacity()/4, 64)
}

// maxCheckpointBlocks bounds the committed blocks kept in memory until a
// checkpoint writes them home.
func (fs *FS) maxCheckpointBlocks() int {
	if fs.journal == nil {
		return 0
	}
	return min(fs.journal.Capacity()/2, 16384)
}

// txnEmpty reports whether the running transaction holds no change.
func (fs *FS) txnEmpty() bool {
	return len(fs.txn.buffers) == 0 && len(fs.dirtyInodes) == 0 && len(fs.dirtyGrp) == 0 &&
		!fs.sbDirty && fs.txn.pendingFreeCount == 0
}

// txnBlocks bounds the blocks the running transaction will journal: its
// buffers, plus the inode table and descriptor blocks the commit will
// write dirty inodes and groups into.
func (fs *FS) txnBlocks() int {
	return len(fs.txn.buffers) + len(fs.dirtyInodes) + 2*len(fs.dirtyGrp) + 1
}

// maybeCommit commits the running transaction if it is large or old.
func (fs *FS) maybeCommit() error {
	if fs.txnEmpty() {
		return nil
	}
	if fs.txn.started.IsZero() {
		fs.txn.started = fs.now()
	}
	interval := fs.opts.CommitInterval
	if fs.txnBlocks() >= fs.maxTxnBlocks() || interval >= 0 && fs.now().Sub(fs.txn.started) >= interval {
		return fs.commit()
	}
	return nil
}

// commit makes the running transaction durable: frees are applied, the
// changed metadata blocks are journaled (file data was written in place
// already and is synced before the commit block), and the blocks join the
// checkpoint list.
//
// Preconditions: fs.mu is held exclusively; no change is half done.
func (fs *FS) commit() error {
	if err := fs.applyPendingFrees(); err != nil {
		return err
	}
	if err := fs.flushObjects(); err != nil {
		return err
	}
	var live []*buffer
	var freed []*buffer
	for _, b := range fs.txn.buffers {
		if b.freed {
			freed = append(freed, b)
		} else {
			live = append(live, b)
		}
	}
	if len(live) == 0 && len(freed) == 0 {
		return fs.syncData()
	}
	if fs.journal == nil {
		if err := fs.commitWithoutJournal(live); err != nil {
			return err
		}
	} else if err := fs.commitToJournal(live, freed); err != nil {
		return err
	}
	fs.cacheMu.Lock()
	for _, b := range freed {
		delete(fs.ckpt, b.blk)
		b.running, b.freed, b.committed, b.shared = false, false, nil, false
		fs.dropLocked(b)
	}
	for _, b := range live {
		b.running = false
		fs.unpinLocked(b)
	}
	fs.cacheMu.Unlock()
	fs.txn.buffers = fs.txn.buffers[:0]
	fs.txn.started = time.Time{}
	fs.txn.dataWritten = false
	fs.stats.Commits++
	if len(fs.ckpt) > fs.maxCheckpointBlocks() {
		return fs.checkpoint()
	}
	return nil
}

func (fs *FS) syncData() error {
	if !fs.txn.dataWritten {
		return nil
	}
	if err := fs.dev.Sync(); err != nil {
		return ioError(err)
	}
	fs.txn.dataWritten = false
	return nil
}

func (fs *FS) commitWithoutJournal(live []*buffer) error {
	slices.SortFunc(live, func(a, b *buffer) int { return cmp.Compare(a.blk, b.blk) })
	if err := fs.writeSorted(live, func(b *buffer) []byte { return b.data }); err != nil {
		return err
	}
	for _, b := range live {
		if b.blk == fs.geo.sbBlock {
			fs.sbHome = slices.Clone(b.data)
		}
	}
	if err := fs.dev.Sync(); err != nil {
		return ioError(err)
	}
	return nil
}

func (fs *FS) commitToJournal(live, freed []*buffer) error {
	revokes := func() []uint64 {
		var r []uint64
		for _, b := range freed {
			if _, ok := fs.inLog[b.blk]; ok {
				r = append(r, b.blk)
			}
		}
		return r
	}
	rv := revokes()
	if !fs.journal.Fits(len(live), len(rv)) {
		if err := fs.checkpoint(); err != nil {
			return err
		}
		rv = revokes()
		if !fs.journal.Fits(len(live), len(rv)) {
			return fmt.Errorf("ext4lite: transaction of %d blocks does not fit the %d-block journal", len(live), fs.journal.Capacity())
		}
	}
	blocks := make([]jbd2.Block, len(live))
	for i, b := range live {
		data := b.data
		if b.blk == fs.geo.sbBlock {
			// Journaled superblocks carry needs_recovery, so replaying
			// one keeps the flag until recovery finishes.
			data = fs.superWithRecover(data, true)
		}
		blocks[i] = jbd2.Block{FSBlock: b.blk, Data: data}
	}
	if err := fs.journal.WriteBody(blocks, rv); err != nil {
		return err
	}
	if fs.journal.Empty() {
		// needs_recovery must be on disk before the log is, so that no
		// crash leaves a log the flag does not announce.
		if err := fs.setRecoverHome(true); err != nil {
			return err
		}
		if err := fs.dev.Sync(); err != nil {
			return ioError(err)
		}
		if err := fs.journal.MarkStart(); err != nil {
			return err
		}
	}
	if err := fs.dev.Sync(); err != nil {
		return ioError(err)
	}
	if err := fs.journal.WriteCommit(fs.now()); err != nil {
		return err
	}
	if err := fs.dev.Sync(); err != nil {
		return ioError(err)
	}
	fs.txn.dataWritten = false
	for i, b := range live {
		b.committed = blocks[i].Data
		b.shared = &blocks[i].Data[0] == &b.data[0]
		fs.ckpt[b.blk] = b
		fs.inLog[b.blk] = struct{}{}
	}
	return nil
}

// checkpoint writes every committed block home, then empties the log and
// clears needs_recovery.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) checkpoint() error {
	if fs.journal == nil || (len(fs.ckpt) == 0 && fs.journal.Empty()) {
		return nil
	}
	bufs := make([]*buffer, 0, len(fs.ckpt))
	for _, b := range fs.ckpt {
		bufs = append(bufs, b)
	}
	slices.SortFunc(bufs, func(a, b *buffer) int { return cmp.Compare(a.blk, b.blk) })
	if err := fs.writeSorted(bufs, func(b *buffer) []byte { return b.committed }); err != nil {
		return err
	}
	for _, b := range bufs {
		if b.blk == fs.geo.sbBlock {
			fs.sbHome = slices.Clone(b.committed)
		}
	}
	if err := fs.dev.Sync(); err != nil {
		return ioError(err)
	}
	if err := fs.journal.Reset(); err != nil {
		return err
	}
	if err := fs.dev.Sync(); err != nil {
		return ioError(err)
	}
	if err := fs.setRecoverHome(false); err != nil {
		return err
	}
	fs.cacheMu.Lock()
	for _, b := range bufs {
		b.committed, b.shared = nil, false
		fs.unpinLocked(b)
	}
	fs.cacheMu.Unlock()
	clear(fs.ckpt)
	clear(fs.inLog)
	fs.stats.Checkpoints++
	return nil
}

// writeSorted writes buffers sorted by block number, coalescing runs of
// consecutive blocks into single device writes.
func (fs *FS) writeSorted(bufs []*buffer, data func(*buffer) []byte) error {
	const maxRun = 256
	bs := fs.geo.blockSize
	run := make([]byte, 0, maxRun*bs)
	for i := 0; i < len(bufs); {
		j := i + 1
		for j < len(bufs) && j-i < maxRun && bufs[j].blk == bufs[j-1].blk+1 {
			j++
		}
		if j == i+1 {
			if err := fs.writeBlocks(bufs[i].blk, data(bufs[i])); err != nil {
				return err
			}
		} else {
			run = run[:0]
			for _, b := range bufs[i:j] {
				run = append(run, data(b)...)
			}
			if err := fs.writeBlocks(bufs[i].blk, run); err != nil {
				return err
			}
		}
		i = j
	}
	return nil
}
