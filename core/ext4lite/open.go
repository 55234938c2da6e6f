package ext4lite

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/cleanup"

	"z.gfire.dev/gvx/core/ext4lite/blockdev"
	"z.gfire.dev/gvx/core/ext4lite/disk"
	"z.gfire.dev/gvx/core/ext4lite/jbd2"
)

// OpenVolume opens the image or delta at path (see blockdev.Open). The
// filesystem owns the device: Close closes it.
func OpenVolume(path string, opts Options) (*FS, error) {
	dev, err := blockdev.Open(path, opts.ReadOnly)
	if err != nil {
		return nil, err
	}
	fs, err := Open(dev, opts)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return fs, nil
}

// Open opens the filesystem on dev, replaying its journal and releasing
// orphaned inodes. The filesystem owns dev from now on (Close closes it);
// on error dev is left open.
func Open(dev blockdev.Device, opts Options) (_ *FS, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = internalError(r)
		}
	}()
	fs := &FS{dev: dev, readOnly: opts.ReadOnly, opts: opts}
	if opts.CommitInterval == 0 {
		fs.opts.CommitInterval = defaultCommitInterval
	}
	fs.cache.init(orDefault(opts.CacheBlocks, 16384))
	fs.icache = inodeCache{limit: orDefault(opts.CacheInodes, 65536), m: make(map[Ino]*inode)}
	fs.ckpt = make(map[uint64]*buffer)
	fs.inLog = make(map[uint64]struct{})
	fs.freedGroups = make(map[uint32]struct{})
	if fs.readOnly {
		fs.overlay = make(map[uint64][]byte)
	}
	fs.generation = opts.Generation
	if fs.generation == 0 {
		fs.generation = rand.Uint32()
	}
	if err := fs.readSuper(); err != nil {
		return nil, err
	}
	if err := fs.setGeometry(); err != nil {
		return nil, err
	}
	if err := fs.loadGroups(); err != nil {
		return nil, err
	}
	nextSeq := uint32(0)
	if fs.sb.HasCompat(disk.CompatHasJournal) {
		if err := fs.openJournal(); err != nil {
			return nil, err
		}
		seq, err := fs.recoverJournal()
		if err != nil {
			return nil, err
		}
		nextSeq = seq
		// Replay may have rewritten anything read so far.
		fs.resetCaches()
		if err := fs.readSuper(); err != nil {
			return nil, err
		}
		if err := fs.loadGroups(); err != nil {
			return nil, err
		}
		if err := fs.openJournal(); err != nil {
			return nil, err
		}
	} else if fs.sb.HasIncompat(disk.IncompatRecover) {
		return nil, corruptf("needs_recovery is set but the filesystem has no journal")
	}
	fs.overhead = fs.computeOverhead()
	if err := fs.loadOrphans(); err != nil {
		return nil, err
	}
	if fs.readOnly {
		return fs, nil
	}
	if err := fs.startWriting(nextSeq); err != nil {
		return nil, err
	}
	if fs.opts.CommitInterval > 0 {
		fs.stopCommitter = make(chan struct{})
		fs.committerDone = make(chan struct{})
		go fs.committer(fs.stopCommitter)
	}
	return fs, nil
}

// committer commits transactions that grew old while the filesystem was
// idle, so that changes reach the journal within about CommitInterval
// even when nothing else happens.
func (fs *FS) committer(stop <-chan struct{}) {
	defer close(fs.committerDone)
	tick := time.NewTicker(fs.opts.CommitInterval / 2)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		fs.mu.Lock()
		if !fs.closed && fs.failed == nil && !fs.txnEmpty() && !fs.txn.started.IsZero() &&
			fs.now().Sub(fs.txn.started) >= fs.opts.CommitInterval {
			var err error
			fs.op = opState{}
			fs.inChange = true
			if err = fs.commit(); err != nil {
				fs.failed = err
			}
			fs.evictCaches()
		}
		fs.mu.Unlock()
	}
}

const defaultCommitInterval = 5e9 // 5s, the kernel's default

func orDefault(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

// readSuper reads the primary superblock and the block holding it.
func (fs *FS) readSuper() error {
	buf := make([]byte, disk.SuperblockSize)
	if _, err := fs.dev.ReadAt(buf, disk.SuperblockOffset); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("ext4lite: the image ends before its superblock (bytes %d to %d): it is no ext4 filesystem, or a cut-short one", disk.SuperblockOffset, disk.SuperblockOffset+disk.SuperblockSize)
		}
		return fmt.Errorf("ext4lite: read superblock: %w", ioError(err))
	}
	if len(fs.overlay) > 0 && fs.geo.blockSize != 0 {
		// A replayed superblock wins in a read-only open.
		if blk, ok := fs.overlay[fs.geo.sbBlock]; ok {
			copy(buf, blk[fs.geo.sbOffset:])
		}
	}
	sb, err := disk.ParseSuperblockHeader(buf)
	if err != nil {
		return err
	}
	// Refused features first: their geometry may look invalid otherwise
	// (bigalloc).
	if err := checkFeatures(sb, fs.readOnly); err != nil {
		return err
	}
	if err := sb.Validate(); err != nil {
		return err
	}
	fs.sb = sb
	return nil
}

// setGeometry derives the layout from the superblock and checks it
// against the device.
func (fs *FS) setGeometry() error {
	fs.geo = newGeometry(fs.sb)
	if need := int64(fs.geo.blocksCount) << fs.geo.blockBits; fs.dev.Size() < need {
		return fmt.Errorf("ext4lite: device is %d bytes, the filesystem needs %d: %w", fs.dev.Size(), need, unix.EIO)
	}
	if uint64(fs.geo.gdtBlocks)+fs.geo.sbBlock+1 > fs.geo.blocksCount {
		return corruptf("group descriptor table does not fit")
	}
	fs.csum = fs.sb.HasMetadataCsum()
	fs.verify = fs.csum && !fs.opts.skipChecksums
	fs.seed = fs.sb.CsumSeed()
	fs.filetype = fs.sb.HasIncompat(disk.IncompatFiletype)
	fs.dirNlink = fs.sb.HasRoCompat(disk.RoCompatDirNlink)
	return nil
}

// resetCaches forgets every cached block and inode.
func (fs *FS) resetCaches() {
	fs.cache.init(fs.cache.limit)
	fs.icache.m = make(map[Ino]*inode)
	fs.icache.lru.Init()
}

// computeOverhead counts metadata blocks, for Statfs.
func (fs *FS) computeOverhead() uint64 {
	if v := fs.sb.OverheadClusters(); v != 0 {
		return uint64(v)
	}
	g := &fs.geo
	var n uint64
	for grp := range g.groups {
		n += uint64(g.superOverhead(grp)) + 2 + uint64(g.itableBlocks)
	}
	if fs.jlog != nil {
		for _, e := range fs.jlog.exts {
			n += uint64(e.Len)
		}
	}
	return min(n, g.blocksCount)
}

// startWriting prepares a read-write open: the journal is taken over
// (empty, with the features the writer uses), orphans are released, and
// the mount is recorded in the superblock, all committed at once.
func (fs *FS) startWriting(nextSeq uint32) error {
	fs.sbHome = make([]byte, fs.geo.blockSize)
	if err := fs.readBlocks(fs.geo.sbBlock, fs.sbHome); err != nil {
		return err
	}
	if fs.jsb != nil {
		w, err := jbd2.NewWriter(fs.jlog, fs.jsb, nextSeq, fs.sb.Is64Bit(), fs.csum)
		if err != nil {
			return err
		}
		fs.journal = w
		if err := fs.dev.Sync(); err != nil {
			return ioError(err)
		}
		if fs.sb.HasIncompat(disk.IncompatRecover) {
			// The log is empty now; the flag goes with it.
			fs.sb.SetFeatureIncompat(fs.sb.FeatureIncompat() &^ disk.IncompatRecover)
			if err := fs.setRecoverHome(false); err != nil {
				return err
			}
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.op = opState{}
	fs.inChange = true
	defer func() { fs.inChange = false }()
	if err := fs.releaseOrphans(); err != nil {
		return err
	}
	now := fs.now()
	fs.sb.SetMtime(uint32(now.Unix()))
	fs.sb.SetMntCount(fs.sb.MntCount() + 1)
	if fs.jsb == nil {
		// Without a journal, "not clean" is all a crash leaves behind.
		fs.sb.SetState(fs.sb.State() &^ disk.StateValid)
	}
	fs.sbDirty = true
	if err := fs.flushObjects(); err != nil {
		return err
	}
	return fs.commit()
}

// Sync commits the running transaction: every change made before it
// returns survives a crash.
func (fs *FS) Sync() (err error) {
	if err := fs.lockWrite(); err != nil {
		if err == unix.EROFS {
			return nil
		}
		return err
	}
	defer fs.unlockWrite(&err)
	if err := fs.flushObjects(); err != nil {
		return err
	}
	return fs.commit()
}

// Fsync makes inode ino's data and metadata durable. ext4lite commits
// everything, like ext4 in ordered mode.
func (fs *FS) Fsync(ino Ino) error { return fs.Sync() }

// Close commits and checkpoints everything, marks the filesystem clean,
// gives the space of blocks freed in this session back to the host, and
// closes the device. After a failure Close only closes the device: the
// image keeps its last committed state.
func (fs *FS) Close() (err error) {
	if fs.stopCommitter != nil {
		// Stop the committer first; it takes fs.mu.
		fs.mu.Lock()
		stop := fs.stopCommitter
		fs.stopCommitter = nil
		fs.mu.Unlock()
		if stop != nil {
			close(stop)
			<-fs.committerDone
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			err = internalError(r)
		}
	}()
	if fs.closed {
		return ErrClosed
	}
	fs.closed = true
	cu := cleanup.Make(func() { fs.dev.Close() })
	defer cu.Clean()
	if fs.readOnly || fs.failed != nil {
		return nil
	}
	fs.op = opState{}
	fs.inChange = true
	if err := fs.closeWriting(); err != nil {
		return err
	}
	cu.Release()
	if err := fs.dev.Close(); err != nil {
		return ioError(err)
	}
	return nil
}

func (fs *FS) closeWriting() error {
	// Whoever still holds references is gone now.
	for _, ino := range slices.Clone(fs.orphans) {
		n, err := fs.getInode(ino)
		if err != nil {
			return err
		}
		n.refs = 0
		if n.raw.Links() == 0 {
			if err := fs.deleteInode(n); err != nil {
				return err
			}
		}
	}
	fs.sb.SetWtime(uint32(fs.now().Unix()))
	if fs.jsb == nil {
		fs.sb.SetState(fs.sb.State() | disk.StateValid)
	}
	fs.sbDirty = true
	if err := fs.flushObjects(); err != nil {
		return err
	}
	if err := fs.commit(); err != nil {
		return err
	}
	if err := fs.checkpoint(); err != nil {
		return err
	}
	if err := fs.discardFreed(); err != nil {
		return err
	}
	if err := fs.dev.Sync(); err != nil {
		return ioError(err)
	}
	return nil
}

// discardFreed gives the host back the space of free blocks in every group
// where blocks were freed since Open.
func (fs *FS) discardFreed() error {
	disc, ok := fs.dev.(blockdev.Discarder)
	if !ok {
		return nil
	}
	g := &fs.geo
	for grp := range fs.freedGroups {
		b, err := fs.bread(fs.groups[grp].desc.BlockBitmap())
		if err != nil {
			return err
		}
		n := g.blocksInGroup(grp)
		for i := uint32(0); i < n; {
			if testBit(b.data, i) {
				i++
				continue
			}
			start := i
			for i < n && !testBit(b.data, i) {
				i++
			}
			blk := g.groupStart(grp) + uint64(start)
			if err := disc.Discard(int64(blk)<<g.blockBits, int64(i-start)<<g.blockBits); err != nil {
				return fmt.Errorf("ext4lite: discard freed blocks: %w", ioError(err))
			}
		}
	}
	clear(fs.freedGroups)
	return nil
}
