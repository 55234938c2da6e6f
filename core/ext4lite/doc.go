// Package ext4lite reads and writes ext4 filesystems held in a single
// host file (or any blockdev.Device), in pure Go, for the Sentry to mount
// volumes without the host kernel.
//
// # Format
//
// Images made by mkfs.ext4 (e2fsprogs 1.47 defaults) open read-write:
// has_journal, ext_attr, resize_inode, dir_index, filetype, extent, 64bit,
// flex_bg, sparse_super, large_file, huge_file, dir_nlink, extra_isize,
// metadata_csum, metadata_csum_seed and uninitialized groups. Every checksum
// written is right, and free block and inode counts stay exact down to the
// group descriptors. Features ext4lite cannot keep consistent are refused
// with an error naming them: inline_data, orphan_file, fast_commit, quota,
// project and unknown ro_compat features allow read-only opens only;
// encrypt, casefold, bigalloc, meta_bg, mmp, ea_inode, journal_dev and
// unknown incompat features are refused entirely. Mkfs makes images with
// the same defaults.
//
// Directories are linear on disk with an in-memory index per directory
// (name → slot, plus free space by size), so lookups and inserts are O(1)
// at any size. Hashed (htree) directories are read linearly; their index is
// stripped, in the same transaction, before the first change.
//
// # Crash safety
//
// Metadata goes through the JBD2 journal in ordered mode with checksum v3:
// changes collect in a running transaction, which commits on Sync/Fsync,
// when it grows large, when it is older than Options.CommitInterval (from a
// background goroutine if the filesystem is idle), and on Close. Dirty
// inodes and group descriptors are written into their blocks, with their
// checksums, once per commit. File data is written in place before the
// commit that makes it reachable. Blocks freed in the running
// transaction cannot be reused before it commits; freed metadata blocks get
// revoke records. needs_recovery is set while committed transactions wait in
// the journal. Open replays journals written by ext4lite or by Linux, then
// releases orphaned inodes. Close commits, checkpoints, marks the journal
// empty and the filesystem clean, and discards blocks freed during the
// session so image files stay sparse. A filesystem without a journal
// (mkfs -O ^has_journal) gets its changes written in place at each commit
// and is marked not clean while open: after a crash it needs e2fsck.
//
// # Using it from a VFS
//
// Inodes are addressed by number (Ino); RootIno is the root directory.
// ext4lite does no permission checks and no setgid or umask handling: the
// caller applies them and passes the resulting mode and Owner. Operations
// stamp ctime/mtime as the kernel does; SetAttr sets times explicitly
// (nanoseconds; clamped to what the inode can store). A caller that keeps
// an inode open across an unlink takes a reference with IncRef and drops
// it with DecRef: the inode then waits on the orphan list, as in the
// kernel, instead of being freed. An inode number that is no longer in use
// gives ESTALE. Directory offsets from ReadDir stay valid while the
// directory changes. Nothing updates atimes on reads (noatime).
//
// # Volumes
//
// Create makes a sparse image file with mkfs.ext4's defaults; Check checks
// one (e2fsck -fn when installed, Verify otherwise); Clone makes an O(1)
// copy (reflink, or a blockdev.Delta over the read-only golden); Flatten
// turns a delta back into a standalone image; OpenVolume opens an image or
// a delta.
//
// # Errors
//
// Failures come back as errors, never panics. Expected conditions wrap a
// unix.Errno (ENOENT, EEXIST, ENOTEMPTY, ENOSPC, ...) and are detected
// before anything changes (free space is reserved up front). Corrupt
// metadata wraps ErrCorrupt and device failures wrap the device error;
// both also match unix.EIO. If such an error strikes in the middle of a
// change, the filesystem fails: the change is never committed, and later
// changes return errors wrapping ErrFailed. A panic inside an operation (a
// bug) is recovered into ErrInternal and fails the filesystem the same
// way.
//
// # Locking
//
// An FS is safe for concurrent use. FS.mu is a readers-writer lock: every
// operation that may change the filesystem (including data writes, Sync and
// Close) holds it exclusively; pure reads (Lookup, Stat, ReadAt, ReadDir,
// Readlink, GetXattr, ListXattr, Statfs) hold it shared and run in
// parallel (ReadDir calls its callback with no lock held). A background
// goroutine takes FS.mu exclusively to commit old transactions. Under the
// shared lock, state that is loaded lazily — a file's
// block map, a directory's index — is guarded per inode by inode.loadMu,
// and the block and inode caches by FS.cacheMu and FS.inodeMu. Lock order:
// FS.mu, then inode.loadMu, then FS.inodeMu or FS.cacheMu (leaf locks,
// never held across I/O except by the block cache's own miss path).
package ext4lite
