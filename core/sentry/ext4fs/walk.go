package ext4fs

import (
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/vfs"

	"z.gfire.dev/gvx/core/ext4lite"
)

// childLocked returns the dentry for name in directory d, instantiating it
// from the disk if it is not cached. The dentry carries no reference for
// the caller: it stays valid while fs.mu is held.
//
// Preconditions: fs.mu is held; d is a directory; name is not "." or "..".
func (fs *filesystem) childLocked(d *dentry, name string) (*dentry, error) {
	d.childMu.Lock()
	defer d.childMu.Unlock()
	if c := d.children[name]; c != nil {
		return c, nil
	}
	if d.removed.Load() {
		return nil, linuxerr.ENOENT
	}
	ino, err := fs.fs.Lookup(d.inode.ino, name)
	if err != nil {
		return nil, errno(err)
	}
	return fs.instantiateChildLocked(d, name, ino)
}

// instantiateChildLocked makes the dentry for name, which refers to ino, in
// d.
//
// Preconditions: fs.mu and d.childMu are held; name is not in d.children.
func (fs *filesystem) instantiateChildLocked(d *dentry, name string, ino ext4lite.Ino) (*dentry, error) {
	i, err := fs.getInode(ino)
	if err != nil {
		return nil, err
	}
	c := fs.newDentry(d, name, i)
	d.children[name] = c
	c.cacheNew()
	return c, nil
}

// childForIno returns the dentry for name in d, which the caller just
// created as inode ino with attributes st.
//
// Preconditions: fs.mu is held.
func (fs *filesystem) childForIno(d *dentry, name string, ino ext4lite.Ino, st *ext4lite.Stat) (*dentry, error) {
	d.childMu.Lock()
	defer d.childMu.Unlock()
	if c := d.children[name]; c != nil {
		return c, nil
	}
	i, err := fs.getInodeStat(ino, st)
	if err != nil {
		return nil, err
	}
	c := fs.newDentry(d, name, i)
	d.children[name] = c
	c.cacheNew()
	return c, nil
}

// cachedChild returns d's cached dentry for name, or nil.
func (d *dentry) cachedChild(name string) *dentry {
	d.childMu.Lock()
	defer d.childMu.Unlock()
	return d.children[name]
}

// peekLocked looks name up in directory d without making a dentry for
// it: it returns the cached dentry if there is one, else the inode's
// number and attributes. A name without a dentry is no mount point, so
// callers that only need the attributes of a final component use this.
//
// Preconditions: fs.mu is held; name is not "." or "..".
func (fs *filesystem) peekLocked(d *dentry, name string) (*dentry, ext4lite.Ino, ext4lite.Stat, error) {
	if c := d.cachedChild(name); c != nil {
		return c, c.inode.ino, ext4lite.Stat{}, nil
	}
	if d.removed.Load() {
		return nil, 0, ext4lite.Stat{}, linuxerr.ENOENT
	}
	ino, err := fs.fs.Lookup(d.inode.ino, name)
	if err != nil {
		return nil, 0, ext4lite.Stat{}, errno(err)
	}
	st, err := fs.fs.Stat(ino)
	if err != nil {
		return nil, 0, ext4lite.Stat{}, errno(err)
	}
	return nil, ino, st, nil
}

// existsLocked reports whether name exists in directory d.
//
// Preconditions: fs.mu is held.
func (fs *filesystem) existsLocked(d *dentry, name string) (bool, error) {
	d.childMu.Lock()
	c := d.children[name]
	d.childMu.Unlock()
	if c != nil {
		return true, nil
	}
	_, err := fs.fs.Lookup(d.inode.ino, name)
	switch {
	case err == nil:
		return true, nil
	case isErrno(err, unix.ENOENT):
		return false, nil
	}
	return false, errno(err)
}

// stepLocked resolves rp.Component() in directory d. It returns the next
// dentry and whether a symbolic link was followed (then rp starts over
// from the link's target and the returned dentry is d).
//
// Preconditions: fs.mu is held; !rp.Done().
func (fs *filesystem) stepLocked(ctx context.Context, rp *vfs.ResolvingPath, d *dentry) (*dentry, bool, error) {
	if !d.inode.isDir() {
		return nil, false, linuxerr.ENOTDIR
	}
	if err := d.inode.checkPermissions(rp.Credentials(), vfs.MayExec); err != nil {
		return nil, false, err
	}
	name := rp.Component()
	switch name {
	case ".":
		rp.Advance()
		return d, false, nil
	case "..":
		if isRoot, err := rp.CheckRoot(ctx, &d.vfsd); err != nil {
			return nil, false, err
		} else if isRoot || d.parent == nil {
			rp.Advance()
			return d, false, nil
		}
		if err := rp.CheckMount(ctx, &d.parent.vfsd); err != nil {
			return nil, false, err
		}
		rp.Advance()
		return d.parent, false, nil
	}
	if len(name) > linux.NAME_MAX {
		return nil, false, linuxerr.ENAMETOOLONG
	}
	child, err := fs.childLocked(d, name)
	if err != nil {
		return nil, false, err
	}
	if err := rp.CheckMount(ctx, &child.vfsd); err != nil {
		return nil, false, err
	}
	if child.inode.isSymlink() && rp.ShouldFollowSymlink() {
		target, err := child.inode.readlink()
		if err != nil {
			return nil, false, err
		}
		followed, err := rp.HandleSymlink(target)
		return d, followed, err
	}
	rp.Advance()
	return child, false, nil
}

// walkParentDirLocked resolves all but the last component of rp to an
// existing directory, starting at d. It does not check that the directory
// is searchable.
//
// Preconditions: fs.mu is held; !rp.Done().
func (fs *filesystem) walkParentDirLocked(ctx context.Context, rp *vfs.ResolvingPath, d *dentry) (*dentry, error) {
	for !rp.Final() {
		next, _, err := fs.stepLocked(ctx, rp, d)
		if err != nil {
			return nil, err
		}
		d = next
	}
	if !d.inode.isDir() {
		return nil, linuxerr.ENOTDIR
	}
	return d, nil
}

// resolveLocked resolves rp to an existing file.
//
// Preconditions: fs.mu is held.
func (fs *filesystem) resolveLocked(ctx context.Context, rp *vfs.ResolvingPath) (*dentry, error) {
	d := rp.Start().Impl().(*dentry)
	if rp.Done() && d.inode.isSymlink() && rp.ShouldFollowSymlink() {
		// The start itself is a link to follow (as tmpfs does, the VFS
		// restarts at an absolute target).
		target, err := d.inode.readlink()
		if err != nil {
			return nil, err
		}
		if _, err := rp.HandleSymlink(target); err != nil {
			return nil, err
		}
		if rp.MustBeDir() && !d.inode.isDir() {
			return nil, linuxerr.ENOTDIR
		}
		return d, nil
	}
	return fs.resolveFromLocked(ctx, rp, d)
}

// resolveFromLocked resolves the rest of rp, starting at d.
//
// Preconditions: fs.mu is held.
func (fs *filesystem) resolveFromLocked(ctx context.Context, rp *vfs.ResolvingPath, d *dentry) (*dentry, error) {
	for !rp.Done() {
		next, _, err := fs.stepLocked(ctx, rp, d)
		if err != nil {
			return nil, err
		}
		d = next
	}
	if rp.MustBeDir() && !d.inode.isDir() {
		return nil, linuxerr.ENOTDIR
	}
	return d, nil
}

// resolve resolves rp to an existing file and returns it with a reference.
func (fs *filesystem) resolve(ctx context.Context, rp *vfs.ResolvingPath) (*dentry, error) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	d, err := fs.resolveLocked(ctx, rp)
	if err != nil {
		return nil, err
	}
	d.IncRef()
	return d, nil
}

// isAncestorLocked reports whether a is a proper ancestor of d.
//
// Preconditions: fs.mu is held.
func isAncestorLocked(a, d *dentry) bool {
	for p := d.parent; p != nil; p = p.parent {
		if p == a {
			return true
		}
	}
	return false
}
