package ext4fs

import (
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/atomicbitops"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sentry/fsutil"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/kernel/pipe"
	"gvisor.dev/gvisor/pkg/sentry/memmap"
	"gvisor.dev/gvisor/pkg/sentry/vfs"

	"z.gfire.dev/gvx/core/ext4lite"
)

// inode is the in-memory state of an ext4 inode that a dentry refers to.
// Hard links share one inode.
//
// +stateify savable
type inode struct {
	fs  *filesystem
	ino ext4lite.Ino
	// ftype is the S_IFMT bits; rdev the device number of device files.
	ftype uint32
	rdev  ext4lite.Dev `state:".(uint64)"`

	// refs counts the dentries referring to the inode. pinned says the
	// inode holds an ext4lite reference (IncRef), so that it outlives its
	// last link while in use. Both are protected by fs.inodesMu.
	refs   int
	pinned bool

	// noLink marks a file made by open(O_TMPFILE|O_EXCL), which may never
	// get a name. Immutable.
	noLink bool

	// mode, uid and gid cache the inode's attributes; this package is the
	// filesystem's only writer. Changes hold attrMu.
	attrMu sync.Mutex `state:"nosave"`
	mode   atomicbitops.Uint32
	uid    atomicbitops.Uint32
	gid    atomicbitops.Uint32

	// acls and target are caches of what is on disk; a restored inode
	// reads them again.
	acls aclCache `state:"nosave"`

	// target caches a symbolic link's target once read.
	target atomic.Pointer[string] `state:"nosave"`

	locks   vfs.FileLocks
	watches vfs.Watches

	// pipe is the pipe of a FIFO.
	pipe *pipe.VFSPipe

	// Regular files only. size is the file size; it changes with ioMu
	// and dataMu held, so either suffices to read it stably.
	ioMu sync.RWMutex `state:"nosave"`
	size atomicbitops.Int64

	// mapsMu protects mappings.
	mapsMu   sync.Mutex `state:"nosave"`
	mappings memmap.MappingSet

	// dataMu protects cache and dirty: the pages of the file held in the
	// memory file while it is mapped, and which of them are newer than
	// the image.
	dataMu sync.Mutex `state:"nosave"`
	cache  fsutil.FileRangeSet
	dirty  fsutil.DirtySet
	// wbErr is the first writeback error since the last fsync, reported
	// (and cleared) by fsync, as Linux reports writeback errors. A
	// checkpoint writes everything back first, so it is nil in one.
	wbErr error `state:"nosave"`
}

// getInode returns the inode for ino with a new reference.
//
// Preconditions: fs.mu is held (either way), so ino cannot be freed.
func (fs *filesystem) getInode(ino ext4lite.Ino) (*inode, error) {
	return fs.getInodeStat(ino, nil)
}

// getInodeStat is getInode for a caller that may know the inode's
// attributes already (it just created it, or stat'ed it): st, if not nil,
// spares reading them.
func (fs *filesystem) getInodeStat(ino ext4lite.Ino, known *ext4lite.Stat) (*inode, error) {
	fs.inodesMu.Lock()
	if i := fs.inodes[ino]; i != nil {
		i.refs++
		fs.inodesMu.Unlock()
		return i, nil
	}
	fs.inodesMu.Unlock()

	var st ext4lite.Stat
	if known != nil {
		st = *known
	} else {
		var err error
		if st, err = fs.fs.Stat(ino); err != nil {
			return nil, errno(err)
		}
	}
	switch st.Mode & linux.S_IFMT {
	case linux.S_IFREG, linux.S_IFDIR, linux.S_IFLNK, linux.S_IFIFO, linux.S_IFCHR, linux.S_IFBLK, linux.S_IFSOCK:
	default:
		log.Warningf("ext4fs: inode %d has no valid file type (mode %#o)", ino, st.Mode)
		return nil, linuxerr.EIO
	}
	fs.inodesMu.Lock()
	defer fs.inodesMu.Unlock()
	if i := fs.inodes[ino]; i != nil {
		i.refs++
		return i, nil
	}
	i := &inode{fs: fs, ino: ino, ftype: st.Mode & linux.S_IFMT, rdev: st.Rdev, refs: 1}
	i.mode.Store(st.Mode)
	i.uid.Store(st.UID)
	i.gid.Store(st.GID)
	i.size.Store(int64(st.Size))
	if i.ftype == linux.S_IFIFO {
		i.pipe = pipe.NewVFSPipe(true /* isNamed */, pipe.DefaultPipeSize)
	}
	fs.inodes[ino] = i
	return i, nil
}

// incRef takes another reference on i.
//
// Preconditions: the caller holds a reference.
func (i *inode) incRef() {
	i.fs.inodesMu.Lock()
	i.refs++
	i.fs.inodesMu.Unlock()
}

// decRef drops a reference. The last one forgets the inode and, if it was
// pinned, lets ext4lite free an inode without links.
func (i *inode) decRef(ctx context.Context) {
	fs := i.fs
	fs.inodesMu.Lock()
	i.refs--
	if i.refs > 0 {
		fs.inodesMu.Unlock()
		return
	}
	delete(fs.inodes, i.ino)
	pinned := i.pinned
	i.pinned = false
	fs.inodesMu.Unlock()

	if i.ftype == linux.S_IFREG {
		i.dropCache(ctx)
	}
	if pinned {
		if err := fs.fs.DecRef(i.ino); err != nil {
			log.Warningf("ext4fs: releasing inode %d: %v", i.ino, err)
		}
	}
}

// pin makes sure i outlives its last link while in memory.
//
// Preconditions: fs.mu is held exclusively, before the change that may
// remove i's last link.
func (i *inode) pin() error {
	fs := i.fs
	fs.inodesMu.Lock()
	defer fs.inodesMu.Unlock()
	if i.pinned {
		return nil
	}
	if err := fs.fs.IncRef(i.ino); err != nil {
		return errno(err)
	}
	i.pinned = true
	return nil
}

// unpinAll lets go of every pinned inode, when the volume closes: the
// files unlinked while open are freed now rather than left to the next
// mount's orphan processing.
func (fs *filesystem) unpinAll() {
	fs.inodesMu.Lock()
	defer fs.inodesMu.Unlock()
	for _, i := range fs.inodes {
		if !i.pinned {
			continue
		}
		i.pinned = false
		if err := fs.fs.DecRef(i.ino); err != nil {
			log.Warningf("ext4fs: releasing inode %d: %v", i.ino, err)
		}
	}
}

func (i *inode) isDir() bool     { return i.ftype == linux.S_IFDIR }
func (i *inode) isSymlink() bool { return i.ftype == linux.S_IFLNK }

func (i *inode) kuid() auth.KUID { return auth.KUID(i.uid.Load()) }
func (i *inode) kgid() auth.KGID { return auth.KGID(i.gid.Load()) }

func (i *inode) fileMode() linux.FileMode { return linux.FileMode(i.mode.Load()) }

// checkPermissions checks that creds may access i as ats asks, honouring
// the inode's access ACL.
func (i *inode) checkPermissions(creds *auth.Credentials, ats vfs.AccessTypes) error {
	return vfs.GenericCheckPermissions(creds, ats, i.fileMode(), i.accessACL(), i.kuid(), i.kgid())
}

// mayDelete checks the sticky-bit rule for removing child from directory
// i.
func (i *inode) mayDelete(creds *auth.Credentials, child *inode) error {
	return vfs.CheckDeleteSticky(creds, i.fileMode(), i.kuid(), child.kuid(), child.kgid())
}

// readlink returns a symbolic link's target.
func (i *inode) readlink() (string, error) {
	if t := i.target.Load(); t != nil {
		return *t, nil
	}
	t, err := i.fs.fs.Readlink(i.ino)
	if err != nil {
		return "", errno(err)
	}
	i.target.Store(&t)
	return t, nil
}

// direntType returns i's type as a DT_* constant.
func (i *inode) direntType() uint8 {
	return linux.FileMode(i.ftype).DirentType()
}
