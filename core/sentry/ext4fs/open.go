package ext4fs

import (
	"strconv"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/vfs"

	"z.gfire.dev/gvx/core/ext4lite"
)

// OpenAt implements vfs.FilesystemImpl.OpenAt.
func (fs *filesystem) OpenAt(ctx context.Context, rp *vfs.ResolvingPath, opts vfs.OpenOptions) (*vfs.FileDescription, error) {
	defer fs.maybeEvict(ctx)
	if opts.Flags&linux.O_TMPFILE == linux.O_TMPFILE {
		return fs.openTmpfile(ctx, rp, opts)
	}
	if opts.Flags&linux.O_CREAT == 0 {
		d, err := fs.resolve(ctx, rp)
		if err != nil {
			return nil, err
		}
		defer d.DecRef(ctx)
		return d.open(ctx, rp, &opts, false /* afterCreate */)
	}
	d, created, err := fs.lookupOrCreate(ctx, rp, &opts)
	if err != nil {
		return nil, err
	}
	defer d.DecRef(ctx)
	fd, err := d.open(ctx, rp, &opts, created)
	if err != nil {
		return nil, err
	}
	if created {
		fd.Dentry().InotifyWithParent(ctx, linux.IN_CREATE, 0, vfs.PathEvent)
	}
	return fd, nil
}

// lookupOrCreate resolves rp for open(O_CREAT), creating a regular file
// if the last component does not exist. It returns the file with a
// reference and whether it was created.
func (fs *filesystem) lookupOrCreate(ctx context.Context, rp *vfs.ResolvingPath, opts *vfs.OpenOptions) (*dentry, bool, error) {
	mustCreate := opts.Flags&linux.O_EXCL != 0
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	start := rp.Start().Impl().(*dentry)
	if rp.Done() {
		// The mount root, or the start of an empty path.
		if rp.MustBeDir() {
			return nil, false, linuxerr.EISDIR
		}
		if mustCreate {
			return nil, false, linuxerr.EEXIST
		}
		start.IncRef()
		return start, false, nil
	}
	for {
		parent, err := fs.walkParentDirLocked(ctx, rp, start)
		if err != nil {
			return nil, false, err
		}
		if err := parent.inode.checkPermissions(rp.Credentials(), vfs.MayExec); err != nil {
			return nil, false, err
		}
		if rp.MustBeDir() {
			return nil, false, linuxerr.EISDIR
		}
		name := rp.Component()
		child, followed, err := fs.stepLocked(ctx, rp, parent)
		if followed {
			if mustCreate {
				return nil, false, linuxerr.EEXIST
			}
			if err != nil {
				// The VFS handles an absolute target.
				return nil, false, err
			}
			start = parent
			continue
		}
		if err == nil {
			if mustCreate {
				return nil, false, linuxerr.EEXIST
			}
			if rp.MustBeDir() && !child.inode.isDir() {
				return nil, false, linuxerr.ENOTDIR
			}
			child.IncRef()
			return child, false, nil
		}
		if !linuxerr.Equals(linuxerr.ENOENT, err) {
			return nil, false, err
		}
		child, err = fs.createRegularLocked(ctx, rp, parent, name, opts)
		if linuxerr.Equals(linuxerr.EEXIST, err) && !mustCreate {
			// Someone else created it meanwhile; open theirs. rp is
			// still at the last component.
			start = parent
			continue
		}
		if err != nil {
			return nil, false, err
		}
		return child, true, nil
	}
}

// createRegularLocked creates regular file name in parent for open and
// returns its dentry with a reference.
//
// Preconditions: fs.mu is held for reading.
func (fs *filesystem) createRegularLocked(ctx context.Context, rp *vfs.ResolvingPath, parent *dentry, name string, opts *vfs.OpenOptions) (*dentry, error) {
	if len(name) > linux.NAME_MAX {
		return nil, linuxerr.ENAMETOOLONG
	}
	if parent.removed.Load() {
		return nil, linuxerr.ENOENT
	}
	if err := parent.inode.checkPermissions(rp.Credentials(), vfs.MayWrite); err != nil {
		return nil, err
	}
	mnt := rp.Mount()
	if err := mnt.CheckBeginWrite(); err != nil {
		return nil, err
	}
	defer mnt.EndWrite()
	nf := prepareNewFile(rp.Credentials(), parent.inode, opts.Mode&^linux.S_IFMT|linux.ModeRegular)
	ino, err := fs.fs.Create(parent.inode.ino, name, uint32(nf.mode)&^linux.S_IFMT, nf.owner)
	if err != nil {
		return nil, errno(err)
	}
	nf.applyACLs(fs, ino)
	child, err := fs.childForIno(parent, name, ino, &ext4lite.Stat{Ino: ino, Mode: uint32(nf.mode), UID: nf.owner.UID, GID: nf.owner.GID})
	if err != nil {
		return nil, err
	}
	child.inode.knownACLs(nf.accessACL, nf.defaultACL)
	child.IncRef()
	return child, nil
}

// openTmpfile implements open(O_TMPFILE): an unnamed regular file in the
// directory rp names, which linkat(2) may give a name unless O_EXCL.
func (fs *filesystem) openTmpfile(ctx context.Context, rp *vfs.ResolvingPath, opts vfs.OpenOptions) (*vfs.FileDescription, error) {
	if !vfs.MayWriteFileWithOpenFlags(opts.Flags) {
		return nil, linuxerr.EINVAL
	}
	d, err := fs.tmpfileDentry(ctx, rp, &opts)
	if err != nil {
		return nil, err
	}
	defer d.DecRef(ctx)
	return d.open(ctx, rp, &opts, true /* afterCreate */)
}

// tmpfileDentry makes the unnamed file of openTmpfile and returns its
// dentry with a reference.
func (fs *filesystem) tmpfileDentry(ctx context.Context, rp *vfs.ResolvingPath, opts *vfs.OpenOptions) (*dentry, error) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	dir, err := fs.resolveLocked(ctx, rp)
	if err != nil {
		return nil, err
	}
	if !dir.inode.isDir() {
		return nil, linuxerr.ENOTDIR
	}
	if dir.removed.Load() {
		return nil, linuxerr.ENOENT
	}
	if err := dir.inode.checkPermissions(rp.Credentials(), vfs.MayWrite|vfs.MayExec); err != nil {
		return nil, err
	}
	mnt := rp.Mount()
	if err := mnt.CheckBeginWrite(); err != nil {
		return nil, err
	}
	defer mnt.EndWrite()
	nf := prepareNewFile(rp.Credentials(), dir.inode, opts.Mode&^linux.S_IFMT|linux.ModeRegular)
	ino, err := fs.fs.CreateTmpfile(dir.inode.ino, uint32(nf.mode)&^linux.S_IFMT, nf.owner)
	if err != nil {
		return nil, errno(err)
	}
	nf.applyACLs(fs, ino)
	i, err := fs.getInode(ino)
	if err != nil {
		fs.fs.DecRef(ino)
		return nil, err
	}
	i.knownACLs(nf.accessACL, nf.defaultACL)
	// The inode takes over CreateTmpfile's ext4lite reference.
	fs.inodesMu.Lock()
	i.pinned = true
	i.noLink = opts.Flags&linux.O_EXCL != 0
	fs.inodesMu.Unlock()
	d := fs.newDentry(dir, "#"+strconv.FormatUint(uint64(ino), 10), i)
	d.tmpfile = true
	d.removed.Store(true)
	d.refs.Store(1)
	return d, nil
}

// open opens d for the caller of OpenAt.
//
// Preconditions: the caller holds a reference on d and no lock (opening a
// FIFO may block).
func (d *dentry) open(ctx context.Context, rp *vfs.ResolvingPath, opts *vfs.OpenOptions, afterCreate bool) (*vfs.FileDescription, error) {
	ats := vfs.AccessTypesForOpenFlags(opts)
	if !afterCreate {
		if err := d.inode.checkPermissions(rp.Credentials(), ats); err != nil {
			return nil, err
		}
	}
	mnt := rp.Mount()
	switch d.inode.ftype {
	case linux.S_IFREG:
		fd := &regularFileFD{}
		fd.LockFD.Init(&d.inode.locks)
		if err := fd.vfsfd.Init(fd, opts.Flags, rp.Credentials(), mnt, &d.vfsd, &vfs.FileDescriptionOptions{AllowDirectIO: true}); err != nil {
			return nil, err
		}
		if !afterCreate && opts.Flags&linux.O_TRUNC != 0 {
			if err := d.inode.truncateForOpen(ctx, mnt); err != nil {
				fd.vfsfd.DecRef(ctx)
				return nil, err
			}
		}
		return &fd.vfsfd, nil
	case linux.S_IFDIR:
		if opts.Flags&linux.O_CREAT != 0 || ats&vfs.MayWrite != 0 {
			return nil, linuxerr.EISDIR
		}
		if opts.Flags&linux.O_DIRECT != 0 {
			return nil, linuxerr.EINVAL
		}
		fd := &directoryFD{}
		fd.LockFD.Init(&d.inode.locks)
		if err := fd.vfsfd.Init(fd, opts.Flags, rp.Credentials(), mnt, &d.vfsd, &vfs.FileDescriptionOptions{AllowDirectIO: true}); err != nil {
			return nil, err
		}
		return &fd.vfsfd, nil
	case linux.S_IFLNK:
		// O_PATH opens are handled by the VFS.
		return nil, linuxerr.ELOOP
	case linux.S_IFIFO:
		return d.inode.pipe.Open(ctx, mnt, &d.vfsd, opts.Flags, &d.inode.locks)
	case linux.S_IFCHR:
		return rp.VirtualFilesystem().OpenDeviceSpecialFile(ctx, mnt, &d.vfsd, vfs.CharDevice, d.inode.rdev.Major, d.inode.rdev.Minor, opts)
	case linux.S_IFBLK:
		return rp.VirtualFilesystem().OpenDeviceSpecialFile(ctx, mnt, &d.vfsd, vfs.BlockDevice, d.inode.rdev.Major, d.inode.rdev.Minor, opts)
	case linux.S_IFSOCK:
		return nil, linuxerr.ENXIO
	}
	// getInode admits only the types above.
	return nil, linuxerr.EIO
}
