package ext4fs

import (
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/fspath"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/socket/unix/transport"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
)

// AccessAt implements vfs.FilesystemImpl.AccessAt.
func (fs *filesystem) AccessAt(ctx context.Context, rp *vfs.ResolvingPath, creds *auth.Credentials, ats vfs.AccessTypes) error {
	defer fs.maybeEvict(ctx)
	d, err := fs.resolve(ctx, rp)
	if err != nil {
		return err
	}
	defer d.DecRef(ctx)
	if err := d.inode.checkPermissions(creds, ats); err != nil {
		return err
	}
	if ats.MayWrite() && rp.Mount().ReadOnly() {
		return linuxerr.EROFS
	}
	return nil
}

// GetDentryAt implements vfs.FilesystemImpl.GetDentryAt.
func (fs *filesystem) GetDentryAt(ctx context.Context, rp *vfs.ResolvingPath, opts vfs.GetDentryOptions) (*vfs.Dentry, error) {
	defer fs.maybeEvict(ctx)
	d, err := fs.resolve(ctx, rp)
	if err != nil {
		return nil, err
	}
	if opts.CheckSearchable {
		if !d.inode.isDir() {
			d.DecRef(ctx)
			return nil, linuxerr.ENOTDIR
		}
		if err := d.inode.checkPermissions(rp.Credentials(), vfs.MayExec); err != nil {
			d.DecRef(ctx)
			return nil, err
		}
	}
	return &d.vfsd, nil
}

// GetParentDentryAt implements vfs.FilesystemImpl.GetParentDentryAt.
func (fs *filesystem) GetParentDentryAt(ctx context.Context, rp *vfs.ResolvingPath) (*vfs.Dentry, error) {
	defer fs.maybeEvict(ctx)
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	d, err := fs.walkParentDirLocked(ctx, rp, rp.Start().Impl().(*dentry))
	if err != nil {
		return nil, err
	}
	d.IncRef()
	return &d.vfsd, nil
}

// ReadlinkAt implements vfs.FilesystemImpl.ReadlinkAt.
func (fs *filesystem) ReadlinkAt(ctx context.Context, rp *vfs.ResolvingPath) (string, error) {
	defer fs.maybeEvict(ctx)
	d, err := fs.resolve(ctx, rp)
	if err != nil {
		return "", err
	}
	defer d.DecRef(ctx)
	if !d.inode.isSymlink() {
		return "", linuxerr.EINVAL
	}
	return d.inode.readlink()
}

// SetStatAt implements vfs.FilesystemImpl.SetStatAt.
func (fs *filesystem) SetStatAt(ctx context.Context, rp *vfs.ResolvingPath, opts vfs.SetStatOptions) error {
	defer fs.maybeEvict(ctx)
	d, err := fs.resolve(ctx, rp)
	if err != nil {
		return err
	}
	defer d.DecRef(ctx)
	if err := d.inode.setStat(ctx, rp.Credentials(), &opts, rp.Mount()); err != nil {
		return err
	}
	if ev := vfs.InotifyEventFromStatMask(opts.Stat.Mask); ev != 0 {
		d.InotifyWithParent(ctx, ev, 0, vfs.InodeEvent)
	}
	return nil
}

// StatAt implements vfs.FilesystemImpl.StatAt.
func (fs *filesystem) StatAt(ctx context.Context, rp *vfs.ResolvingPath, opts vfs.StatOptions) (linux.Statx, error) {
	if rp.Done() {
		// No lock: the VFS holds the start.
		return rp.Start().Impl().(*dentry).inode.stat()
	}
	defer fs.maybeEvict(ctx)
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	parent, err := fs.walkParentDirLocked(ctx, rp, rp.Start().Impl().(*dentry))
	if err != nil {
		return linux.Statx{}, err
	}
	// The common case, a name without a dentry (stat of directory
	// entries by ls -l, find, tar), needs none.
	if name := rp.Component(); name != "." && name != ".." && len(name) <= linux.NAME_MAX {
		if err := parent.inode.checkPermissions(rp.Credentials(), vfs.MayExec); err != nil {
			return linux.Statx{}, err
		}
		c, _, st, err := fs.peekLocked(parent, name)
		if err != nil {
			return linux.Statx{}, err
		}
		if c == nil && !(st.Mode&linux.S_IFMT == linux.S_IFLNK && rp.ShouldFollowSymlink()) {
			if rp.MustBeDir() && st.Mode&linux.S_IFMT != linux.S_IFDIR {
				return linux.Statx{}, linuxerr.ENOTDIR
			}
			return fs.statx(&st), nil
		}
	}
	d, err := fs.resolveFromLocked(ctx, rp, parent)
	if err != nil {
		return linux.Statx{}, err
	}
	return d.inode.stat()
}

// StatFSAt implements vfs.FilesystemImpl.StatFSAt.
func (fs *filesystem) StatFSAt(ctx context.Context, rp *vfs.ResolvingPath) (linux.Statfs, error) {
	defer fs.maybeEvict(ctx)
	d, err := fs.resolve(ctx, rp)
	if err != nil {
		return linux.Statfs{}, err
	}
	d.DecRef(ctx)
	return fs.statFS()
}

// BoundEndpointAt implements vfs.FilesystemImpl.BoundEndpointAt.
func (fs *filesystem) BoundEndpointAt(ctx context.Context, rp *vfs.ResolvingPath, opts vfs.BoundEndpointOptions) (transport.BoundEndpoint, error) {
	defer fs.maybeEvict(ctx)
	d, err := fs.resolve(ctx, rp)
	if err != nil {
		return nil, err
	}
	defer d.DecRef(ctx)
	if err := d.inode.checkPermissions(rp.Credentials(), vfs.MayWrite); err != nil {
		return nil, err
	}
	if d.inode.ftype != linux.S_IFSOCK {
		return nil, linuxerr.ECONNREFUSED
	}
	fs.endpointsMu.Lock()
	ep := fs.endpoints[d.inode.ino]
	fs.endpointsMu.Unlock()
	if ep == nil {
		return nil, linuxerr.ECONNREFUSED
	}
	return ep, nil
}

// ListXattrAt implements vfs.FilesystemImpl.ListXattrAt.
func (fs *filesystem) ListXattrAt(ctx context.Context, rp *vfs.ResolvingPath, size uint64) ([]string, error) {
	defer fs.maybeEvict(ctx)
	d, err := fs.resolve(ctx, rp)
	if err != nil {
		return nil, err
	}
	defer d.DecRef(ctx)
	return d.inode.listXattr(rp.Credentials())
}

// GetXattrAt implements vfs.FilesystemImpl.GetXattrAt.
func (fs *filesystem) GetXattrAt(ctx context.Context, rp *vfs.ResolvingPath, opts vfs.GetXattrOptions) (string, error) {
	defer fs.maybeEvict(ctx)
	d, err := fs.resolve(ctx, rp)
	if err != nil {
		return "", err
	}
	defer d.DecRef(ctx)
	return d.inode.getXattr(rp.Credentials(), &opts)
}

// SetXattrAt implements vfs.FilesystemImpl.SetXattrAt.
func (fs *filesystem) SetXattrAt(ctx context.Context, rp *vfs.ResolvingPath, opts vfs.SetXattrOptions) error {
	return fs.changeAttrs(ctx, rp, func(d *dentry) error { return d.inode.setXattr(rp.Credentials(), &opts) })
}

// RemoveXattrAt implements vfs.FilesystemImpl.RemoveXattrAt.
func (fs *filesystem) RemoveXattrAt(ctx context.Context, rp *vfs.ResolvingPath, name string) error {
	return fs.changeAttrs(ctx, rp, func(d *dentry) error { return d.inode.removeXattr(rp.Credentials(), name) })
}

// changeAttrs resolves rp, applies change to the file it names with the
// mount held for writing, and reports IN_ATTRIB when change succeeds.
func (fs *filesystem) changeAttrs(ctx context.Context, rp *vfs.ResolvingPath, change func(*dentry) error) error {
	defer fs.maybeEvict(ctx)
	d, err := fs.resolve(ctx, rp)
	if err != nil {
		return err
	}
	defer d.DecRef(ctx)
	mnt := rp.Mount()
	if err := mnt.CheckBeginWrite(); err != nil {
		return err
	}
	defer mnt.EndWrite()
	if err := change(d); err != nil {
		return err
	}
	d.InotifyWithParent(ctx, linux.IN_ATTRIB, 0, vfs.InodeEvent)
	return nil
}

// GetPosixACLAt implements vfs.FilesystemImpl.GetPosixACLAt.
func (fs *filesystem) GetPosixACLAt(ctx context.Context, rp *vfs.ResolvingPath, t vfs.ACLType) (*vfs.PosixACL, error) {
	defer fs.maybeEvict(ctx)
	d, err := fs.resolve(ctx, rp)
	if err != nil {
		return nil, err
	}
	defer d.DecRef(ctx)
	return d.inode.getPosixACL(t)
}

// SetPosixACLAt implements vfs.FilesystemImpl.SetPosixACLAt.
func (fs *filesystem) SetPosixACLAt(ctx context.Context, rp *vfs.ResolvingPath, t vfs.ACLType, acl *vfs.PosixACL, clearSGID bool) (*vfs.PosixACL, linux.FileMode, error) {
	defer fs.maybeEvict(ctx)
	d, err := fs.resolve(ctx, rp)
	if err != nil {
		return nil, 0, err
	}
	defer d.DecRef(ctx)
	mnt := rp.Mount()
	if err := mnt.CheckBeginWrite(); err != nil {
		return nil, 0, err
	}
	defer mnt.EndWrite()
	return d.inode.setPosixACL(rp.Credentials(), t, acl, clearSGID)
}

// PrependPath implements vfs.FilesystemImpl.PrependPath.
func (fs *filesystem) PrependPath(ctx context.Context, vfsroot, vd vfs.VirtualDentry, b *fspath.Builder) error {
	fs.ancestryMu.RLock()
	defer fs.ancestryMu.RUnlock()
	mnt := vd.Mount()
	d := vd.Dentry().Impl().(*dentry)
	for {
		if mnt == vfsroot.Mount() && &d.vfsd == vfsroot.Dentry() {
			return vfs.PrependPathAtVFSRootError{}
		}
		if mnt != nil && &d.vfsd == mnt.Root() {
			return nil
		}
		if d.parent == nil {
			return vfs.PrependPathAtNonMountRootError{}
		}
		b.PrependComponent(d.name)
		d = d.parent
	}
}

// IsDescendant implements vfs.FilesystemImpl.IsDescendant.
func (fs *filesystem) IsDescendant(vfsroot, vd vfs.VirtualDentry) bool {
	fs.ancestryMu.RLock()
	defer fs.ancestryMu.RUnlock()
	for d := vd.Dentry().Impl().(*dentry); d != nil; d = d.parent {
		if &d.vfsd == vfsroot.Dentry() {
			return true
		}
	}
	return false
}
