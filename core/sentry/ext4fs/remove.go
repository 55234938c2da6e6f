package ext4fs

import (
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/refs"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
)

// UnlinkAt implements vfs.FilesystemImpl.UnlinkAt.
func (fs *filesystem) UnlinkAt(ctx context.Context, rp *vfs.ResolvingPath) error {
	return fs.doRemoveAt(ctx, rp, false /* dir */)
}

// RmdirAt implements vfs.FilesystemImpl.RmdirAt.
func (fs *filesystem) RmdirAt(ctx context.Context, rp *vfs.ResolvingPath) error {
	return fs.doRemoveAt(ctx, rp, true /* dir */)
}

// doRemoveAt implements UnlinkAt and RmdirAt.
func (fs *filesystem) doRemoveAt(ctx context.Context, rp *vfs.ResolvingPath, dir bool) error {
	// Dead mount points are released after fs.mu: that may release this
	// filesystem.
	var toDecRef []refs.RefCounter
	defer func() {
		for _, r := range toDecRef {
			r.DecRef(ctx)
		}
	}()
	defer fs.maybeEvict(ctx)
	fs.mu.Lock()
	defer fs.mu.Unlock()

	parent, err := fs.walkParentDirLocked(ctx, rp, rp.Start().Impl().(*dentry))
	if err != nil {
		return err
	}
	creds := rp.Credentials()
	if err := parent.inode.checkPermissions(creds, vfs.MayWrite|vfs.MayExec); err != nil {
		return err
	}
	name := rp.Component()
	switch {
	case dir && name == ".":
		return linuxerr.EINVAL
	case dir && name == "..":
		return linuxerr.ENOTEMPTY
	case name == "." || name == "..":
		return linuxerr.EISDIR
	}
	if !dir {
		if done, err := fs.unlinkUncachedLocked(ctx, rp, parent, name); done {
			return err
		}
	}
	child, err := fs.childLocked(parent, name)
	if err != nil {
		return err
	}
	if err := parent.inode.mayDelete(creds, child.inode); err != nil {
		return err
	}
	switch {
	case dir && !child.inode.isDir():
		return linuxerr.ENOTDIR
	case !dir && child.inode.isDir():
		return linuxerr.EISDIR
	case !dir && rp.MustBeDir():
		return linuxerr.ENOTDIR
	}
	mnt := rp.Mount()
	if err := mnt.CheckBeginWrite(); err != nil {
		return err
	}
	defer mnt.EndWrite()
	vfsObj := rp.VirtualFilesystem()
	mntns := vfs.MountNamespaceFromContext(ctx)
	defer mntns.DecRef(ctx)
	if err := vfsObj.PrepareDeleteDentry(mntns, &child.vfsd); err != nil {
		return err
	}
	if err := fs.pinForRemoval(child); err != nil {
		vfsObj.AbortDeleteDentry(&child.vfsd)
		return err
	}
	if dir {
		err = fs.fs.Rmdir(parent.inode.ino, name)
	} else {
		err = fs.fs.Unlink(parent.inode.ino, name)
	}
	if err != nil {
		vfsObj.AbortDeleteDentry(&child.vfsd)
		return errno(err)
	}
	if dir {
		parent.inode.watches.Notify(ctx, name, linux.IN_DELETE|linux.IN_ISDIR, 0, vfs.InodeEvent, true /* unlinked */)
	} else {
		vfs.InotifyRemoveChild(ctx, &child.inode.watches, &parent.inode.watches, name)
	}
	fs.detachLocked(ctx, child)
	toDecRef = vfsObj.CommitDeleteDentry(ctx, &child.vfsd)
	return nil
}

// unlinkUncachedLocked unlinks name from parent if nothing of it is in
// memory (no dentry, no inode): then no one uses the file and nothing is
// mounted on it, and the unlink needs no dentry. It reports whether it
// handled the call.
//
// Preconditions: fs.mu is held exclusively; the caller checked that
// parent is writable and searchable.
func (fs *filesystem) unlinkUncachedLocked(ctx context.Context, rp *vfs.ResolvingPath, parent *dentry, name string) (bool, error) {
	if parent.removed.Load() || parent.cachedChild(name) != nil {
		return false, nil
	}
	ino, err := fs.fs.Lookup(parent.inode.ino, name)
	if err != nil {
		return true, errno(err)
	}
	fs.inodesMu.Lock()
	_, inMemory := fs.inodes[ino]
	fs.inodesMu.Unlock()
	if inMemory {
		return false, nil
	}
	st, err := fs.fs.Stat(ino)
	if err != nil {
		return true, errno(err)
	}
	if err := vfs.CheckDeleteSticky(rp.Credentials(), parent.inode.fileMode(), parent.inode.kuid(), auth.KUID(st.UID), auth.KGID(st.GID)); err != nil {
		return true, err
	}
	switch {
	case st.Mode&linux.S_IFMT == linux.S_IFDIR:
		return true, linuxerr.EISDIR
	case rp.MustBeDir():
		return true, linuxerr.ENOTDIR
	}
	mnt := rp.Mount()
	if err := mnt.CheckBeginWrite(); err != nil {
		return true, err
	}
	defer mnt.EndWrite()
	if err := fs.fs.Unlink(parent.inode.ino, name); err != nil {
		return true, errno(err)
	}
	parent.inode.watches.Notify(ctx, name, linux.IN_DELETE, 0, vfs.InodeEvent, true /* unlinked */)
	if st.Mode&linux.S_IFMT == linux.S_IFSOCK && st.Nlink <= 1 {
		fs.endpointsMu.Lock()
		delete(fs.endpoints, ino)
		fs.endpointsMu.Unlock()
	}
	return true, nil
}

// pinForRemoval makes d's inode outlive the removal of d's name if anyone
// may still use it: an open file, a working directory, another dentry.
//
// Preconditions: fs.mu is held exclusively.
func (fs *filesystem) pinForRemoval(d *dentry) error {
	fs.inodesMu.Lock()
	shared := d.inode.refs > 1
	fs.inodesMu.Unlock()
	if d.refs.Load() == 0 && !shared {
		// d is destroyed right after the removal, and with it the inode.
		return nil
	}
	return d.inode.pin()
}

// detachLocked takes d, whose name is gone, out of the tree. It is
// destroyed now if unreferenced, else with its last reference.
//
// Preconditions: fs.mu is held exclusively.
func (fs *filesystem) detachLocked(ctx context.Context, d *dentry) {
	d.parent.forgetChild(d)
	d.removed.Store(true)
	if d.inode.ftype == linux.S_IFSOCK {
		fs.forgetEndpointIfUnlinked(d.inode)
	}
	if d.refs.CompareAndSwap(0, -1) {
		d.destroy(ctx)
	}
}

// forgetEndpointIfUnlinked drops the socket bound to i once i has no
// links left.
func (fs *filesystem) forgetEndpointIfUnlinked(i *inode) {
	if st, err := fs.fs.Stat(i.ino); err == nil && st.Nlink > 0 {
		return
	}
	fs.endpointsMu.Lock()
	delete(fs.endpoints, i.ino)
	fs.endpointsMu.Unlock()
}
