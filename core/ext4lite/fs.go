package ext4lite

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/blockdev"
	"z.gfire.dev/gvx/core/ext4lite/disk"
	"z.gfire.dev/gvx/core/ext4lite/jbd2"
)

// Ino is an inode number.
type Ino = uint32

// RootIno is the root directory's inode number.
const RootIno Ino = disk.RootIno

// Options configure Open.
type Options struct {
	// ReadOnly opens the filesystem without ever writing the device. A
	// journal that needs recovery is replayed in memory only.
	ReadOnly bool
	// Now returns the time stamped on changes; time.Now if nil.
	Now func() time.Time
	// CacheBlocks bounds the clean metadata blocks kept cached
	// (default 16384). Blocks of uncommitted or unchecked transactions
	// are always kept.
	CacheBlocks int
	// CacheInodes bounds the clean inodes kept cached (default 65536).
	// Cached inodes keep their directory index and block map.
	CacheInodes int
	// CommitInterval: a running transaction older than this commits, at
	// the end of the next change or from a background goroutine when the
	// filesystem is idle (default 5s, as the kernel; negative: only on
	// Sync, Close and when it grows large).
	CommitInterval time.Duration
	// Generation seeds the generation numbers of new inodes (default:
	// random).
	Generation uint32
	// OnCorruption, if set, is called with the error of every operation
	// that met corrupt metadata or an internal error (ErrCorrupt,
	// ErrInternal): a caller that turns these into EIO, as a guest's
	// kernel does, can still say why. It is called after the filesystem's
	// lock is released, from the operation's goroutine.
	OnCorruption func(err error)

	// skipChecksums lets fuzz tests reach the parsers behind checksums.
	skipChecksums bool
}

// ErrClosed is returned by operations on a closed filesystem.
var ErrClosed = errors.New("ext4lite: filesystem is closed")

// FS is an open ext4 filesystem. See the package documentation for the
// locking rules.
type FS struct {
	dev      blockdev.Device
	readOnly bool
	opts     Options
	geo      geometry
	csum     bool   // metadata_csum
	verify   bool   // check checksums on read (csum, unless fuzzing)
	seed     uint32 // metadata checksum seed
	filetype bool   // directory entries carry file types
	dirNlink bool
	journal  *jbd2.Writer // nil without a journal or read-only
	jlog     *journalLog
	// jsb is the journal superblock (nil without a journal).
	jsb *jbd2.Superblock

	// mu: see the package documentation.
	mu     sync.RWMutex
	closed bool
	failed error
	// inChange is set while a change holds mu exclusively.
	inChange bool

	// The fields below are protected by mu held exclusively (or shared for
	// reading).
	sb       *disk.Superblock
	sbDirty  bool
	groups   []group
	dirtyGrp []uint32
	// freeBlocks and freeInodes mirror the sum of the group descriptors.
	freeBlocks uint64
	freeInodes uint64
	txn        txn
	op         opState
	// ckpt holds buffers whose committed copy awaits the checkpoint.
	ckpt map[uint64]*buffer
	// inLog holds the blocks journaled since the log was last reset; a
	// freed block in it needs a revoke record.
	inLog map[uint64]struct{}
	// sbHome is the superblock block as last written to its home.
	sbHome      []byte
	orphans     []Ino
	dirtyInodes []*inode
	generation  uint32
	// freedGroups are the groups where blocks were freed since Open; Close
	// discards their free space.
	freedGroups map[uint32]struct{}
	// overhead is the number of metadata blocks, which Statfs does not
	// count as capacity.
	overhead uint64
	// zone is the metadata no file may map (see metaZone); it changes
	// only while opening.
	zone metaZone
	// overlay holds replayed journal blocks of a read-only open.
	overlay map[uint64][]byte
	stats   Stats

	// stopCommitter stops the background committer; committerDone is
	// closed when it is gone.
	stopCommitter chan struct{}
	committerDone chan struct{}

	cacheMu sync.Mutex
	cache   blockCache

	inodeMu sync.Mutex
	icache  inodeCache
}

// Stats counts what the filesystem did since Open.
type Stats struct {
	Commits       int
	Checkpoints   int
	JournalBlocks int
	Replayed      int // blocks replayed from the journal at Open
	Revoked       int // journaled blocks not replayed because of revoke records
	Orphans       int // orphaned inodes released at Open
}

// txn is the running transaction.
type txn struct {
	buffers []*buffer
	// pendingFree are blocks freed in this transaction. They stay marked
	// in the bitmaps, so nothing reuses them, until commit applies them.
	pendingFree      []blockRange
	pendingFreeCount uint64
	started          time.Time
	// dataWritten says file data was written since the last device sync.
	dataWritten bool
}

type blockRange struct {
	start uint64
	n     uint64
}

// opState tracks the change being made.
type opState struct {
	mutated bool
	err     error // an internal failure detected where no error can return
}

func (fs *FS) now() time.Time {
	if fs.opts.Now != nil {
		return fs.opts.Now()
	}
	return time.Now()
}

func (fs *FS) nowStamp() disk.Timestamp {
	t := fs.now()
	return disk.Timestamp{Sec: t.Unix(), Nsec: uint32(t.Nanosecond())}
}

// opFail records an internal failure of the running change.
func (fs *FS) opFail(err error) {
	if fs.op.err == nil {
		fs.op.err = err
	}
}

// lockWrite starts a change.
func (fs *FS) lockWrite() error {
	fs.mu.Lock()
	switch {
	case fs.closed:
		fs.mu.Unlock()
		return ErrClosed
	case fs.readOnly:
		fs.mu.Unlock()
		return unix.EROFS
	case fs.failed != nil:
		err := fs.failed
		fs.mu.Unlock()
		return fmt.Errorf("%w (%v): %w", ErrFailed, err, unix.EIO)
	}
	fs.op = opState{}
	fs.inChange = true
	return nil
}

// unlockWrite ends a change: on a fatal error the filesystem fails;
// otherwise the transaction may commit.
func (fs *FS) unlockWrite(errp *error) {
	defer fs.reportCorruption(errp)
	defer fs.mu.Unlock()
	defer fs.evictCaches()
	if r := recover(); r != nil {
		// A bug, or corruption that slipped past the checks: the change is
		// half made, so the filesystem fails rather than commit it.
		*errp = internalError(r)
		fs.failed = *errp
		return
	}
	err := *errp
	if fs.op.err != nil {
		err = fs.op.err
		*errp = err
	}
	if err != nil && fs.op.mutated && isFatal(err) {
		fs.failed = err
		return
	}
	// Dirty inodes, group descriptors and the superblock stay in memory
	// until the commit writes them into their blocks (with checksums) once
	// for all the changes of the transaction.
	if err := fs.maybeCommit(); err != nil {
		fs.failed = err
		if *errp == nil {
			*errp = err
		}
	}
}

// updateInode runs change on inode ino as one change of the filesystem
// (lockWrite … unlockWrite).
func (fs *FS) updateInode(ino Ino, change func(n *inode) error) (err error) {
	if err := fs.lockWrite(); err != nil {
		return err
	}
	defer fs.unlockWrite(&err)
	n, err := fs.getInode(ino)
	if err != nil {
		return err
	}
	return change(n)
}

// unlockRead ends a read, turning a panic into an error.
func (fs *FS) unlockRead(errp *error) {
	if r := recover(); r != nil {
		*errp = internalError(r)
	}
	fs.mu.RUnlock()
	fs.reportCorruption(errp)
}

// reportCorruption passes *errp to Options.OnCorruption if it reports
// corruption or an internal error.
//
// Preconditions: fs.mu is not held.
func (fs *FS) reportCorruption(errp *error) {
	if err := *errp; err != nil && fs.opts.OnCorruption != nil && (errors.Is(err, ErrCorrupt) || errors.Is(err, ErrInternal)) {
		fs.opts.OnCorruption(err)
	}
}

// lockRead starts a read.
func (fs *FS) lockRead() error {
	fs.mu.RLock()
	if fs.closed {
		fs.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// Superblock returns a copy of the in-memory superblock.
func (fs *FS) Superblock() disk.Superblock {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	return *fs.sb
}

// BlockSize is the filesystem block size.
func (fs *FS) BlockSize() int { return fs.geo.blockSize }

// Stats returns counters since Open.
func (fs *FS) Stats() Stats {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	return fs.stats
}

// evictCaches trims the caches after a change.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) evictCaches() {
	fs.inChange = false
	fs.cacheMu.Lock()
	fs.evictLocked()
	fs.cacheMu.Unlock()
	fs.inodeMu.Lock()
	fs.evictInodesLocked()
	fs.inodeMu.Unlock()
}
