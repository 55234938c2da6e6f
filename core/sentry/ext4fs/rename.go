package ext4fs

import (
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/refs"
	"gvisor.dev/gvisor/pkg/sentry/vfs"

	"z.gfire.dev/gvx/core/ext4lite"
)

// RenameAt implements vfs.FilesystemImpl.RenameAt.
func (fs *filesystem) RenameAt(ctx context.Context, rp *vfs.ResolvingPath, oldParentVD vfs.VirtualDentry, oldName string, opts vfs.RenameOptions) error {
	var toDecRef []refs.RefCounter
	defer func() {
		for _, r := range toDecRef {
			r.DecRef(ctx)
		}
	}()
	defer fs.maybeEvict(ctx)
	fs.mu.Lock()
	defer fs.mu.Unlock()

	newParent, err := fs.walkParentDirLocked(ctx, rp, rp.Start().Impl().(*dentry))
	if err != nil {
		return err
	}
	const known = linux.RENAME_NOREPLACE | linux.RENAME_EXCHANGE | linux.RENAME_WHITEOUT
	if opts.Flags&^known != 0 {
		return linuxerr.EINVAL
	}
	exchange := opts.Flags&linux.RENAME_EXCHANGE != 0
	noReplace := opts.Flags&linux.RENAME_NOREPLACE != 0
	whiteout := opts.Flags&linux.RENAME_WHITEOUT != 0
	if exchange && (noReplace || whiteout) {
		return linuxerr.EINVAL
	}
	creds := rp.Credentials()
	if whiteout && !creds.HasRootCapability(linux.CAP_MKNOD) {
		return linuxerr.EPERM
	}
	newName := rp.Component()
	if newName == "." || newName == ".." {
		if noReplace {
			return linuxerr.EEXIST
		}
		return linuxerr.EBUSY
	}
	if len(newName) > linux.NAME_MAX {
		return linuxerr.ENAMETOOLONG
	}
	mnt := rp.Mount()
	if mnt != oldParentVD.Mount() {
		return linuxerr.EXDEV
	}
	if err := mnt.CheckBeginWrite(); err != nil {
		return err
	}
	defer mnt.EndWrite()

	oldParent := oldParentVD.Dentry().Impl().(*dentry)
	if err := oldParent.inode.checkPermissions(creds, vfs.MayWrite|vfs.MayExec); err != nil {
		return err
	}
	renamed, err := fs.childLocked(oldParent, oldName)
	if err != nil {
		return err
	}
	if err := oldParent.inode.mayDelete(creds, renamed.inode); err != nil {
		return err
	}
	// A mount point is renamed itself: no CheckMount.
	if renamed.inode.isDir() {
		if renamed == newParent || isAncestorLocked(renamed, newParent) {
			return linuxerr.EINVAL
		}
		if oldParent != newParent {
			// Writing renamed's "..".
			if err := renamed.inode.checkPermissions(creds, vfs.MayWrite); err != nil {
				return err
			}
		}
	} else if !exchange && (opts.MustBeDir || rp.MustBeDir()) {
		return linuxerr.ENOTDIR
	}
	if err := newParent.inode.checkPermissions(creds, vfs.MayWrite|vfs.MayExec); err != nil {
		return err
	}
	replaced, err := fs.childLocked(newParent, newName)
	switch {
	case err == nil:
		if noReplace {
			return linuxerr.EEXIST
		}
		if err := newParent.inode.mayDelete(creds, replaced.inode); err != nil {
			return err
		}
		if err := checkReplace(renamed, replaced, oldParent, newParent, exchange, opts.MustBeDir, rp.MustBeDir()); err != nil {
			return err
		}
	case linuxerr.Equals(linuxerr.ENOENT, err):
		if exchange {
			return linuxerr.ENOENT
		}
		replaced = nil
	default:
		return err
	}
	if newParent.removed.Load() {
		return linuxerr.ENOENT
	}
	if renamed == replaced || (replaced != nil && !exchange && replaced.inode == renamed.inode) {
		// The same file: rename(2) does nothing.
		return nil
	}

	vfsObj := rp.VirtualFilesystem()
	mntns := vfs.MountNamespaceFromContext(ctx)
	defer mntns.DecRef(ctx)
	var replacedVFSD *vfs.Dentry
	if replaced != nil {
		replacedVFSD = &replaced.vfsd
	}
	handle, err := vfsObj.PrepareRenameDentry(mntns, &renamed.vfsd, replacedVFSD)
	if err != nil {
		return err
	}
	if replaced != nil && !exchange {
		if err := fs.pinForRemoval(replaced); err != nil {
			vfsObj.AbortRenameDentry(&handle, &renamed.vfsd, replacedVFSD)
			return err
		}
	}
	var flags uint32
	switch {
	case exchange:
		flags = ext4lite.RenameExchange
	case whiteout:
		flags = ext4lite.RenameWhiteout
	case noReplace:
		flags = ext4lite.RenameNoReplace
	}
	if err := fs.fs.Rename(oldParent.inode.ino, oldName, newParent.inode.ino, newName, flags); err != nil {
		vfsObj.AbortRenameDentry(&handle, &renamed.vfsd, replacedVFSD)
		return errno(err)
	}
	vfsObj.RenameBegin(&handle)

	if exchange {
		fs.exchangeLocked(renamed, replaced)
		vfsObj.CommitRenameExchangeDentry(&handle, &renamed.vfsd, replacedVFSD)
		vfs.InotifyRename(ctx, &renamed.inode.watches, &oldParent.inode.watches, &newParent.inode.watches, oldName, newName, renamed.inode.isDir())
		vfs.InotifyRename(ctx, &replaced.inode.watches, &newParent.inode.watches, &oldParent.inode.watches, newName, oldName, replaced.inode.isDir())
		return nil
	}
	if replaced != nil {
		fs.detachLocked(ctx, replaced)
	}
	fs.moveLocked(renamed, newParent, newName)
	toDecRef = vfsObj.CommitRenameReplaceDentry(ctx, &handle, &renamed.vfsd, replacedVFSD)
	vfs.InotifyRename(ctx, &renamed.inode.watches, &oldParent.inode.watches, &newParent.inode.watches, oldName, newName, renamed.inode.isDir())
	return nil
}

// checkReplace checks renaming renamed over (or exchanging it with) the
// existing replaced, as Linux's vfs_rename does.
func checkReplace(renamed, replaced, oldParent, newParent *dentry, exchange, oldMustBeDir, newMustBeDir bool) error {
	if exchange {
		// Exchanging a file with one of its ancestors would cut the
		// ancestor off the tree.
		if isAncestorLocked(replaced, renamed) {
			return linuxerr.EINVAL
		}
		if newMustBeDir && !replaced.inode.isDir() {
			return linuxerr.ENOTDIR
		}
		if oldMustBeDir && !renamed.inode.isDir() {
			return linuxerr.ENOTDIR
		}
		return nil
	}
	if isAncestorLocked(replaced, renamed) {
		return linuxerr.ENOTEMPTY
	}
	if replaced.inode.isDir() {
		if !renamed.inode.isDir() {
			return linuxerr.EISDIR
		}
		return nil
	}
	if newMustBeDir || renamed.inode.isDir() {
		return linuxerr.ENOTDIR
	}
	return nil
}

// moveLocked moves d to name in newParent.
//
// Preconditions: fs.mu is held exclusively; name is free in newParent's
// children.
func (fs *filesystem) moveLocked(d, newParent *dentry, name string) {
	oldParent := d.parent
	oldParent.forgetChild(d)
	newParent.childMu.Lock()
	newParent.children[name] = d
	newParent.childMu.Unlock()
	fs.ancestryMu.Lock()
	d.parent, d.name = newParent, name
	fs.ancestryMu.Unlock()
	if oldParent != newParent {
		// d's reference on its parent moves with it. oldParent is
		// referenced by the caller (oldParentVD), so this is not its last.
		newParent.IncRef()
		oldParent.DecRef(context.Background())
	}
}

// exchangeLocked swaps the places of a and b in the tree.
//
// Preconditions: fs.mu is held exclusively.
func (fs *filesystem) exchangeLocked(a, b *dentry) {
	ap, an, bp, bn := a.parent, a.name, b.parent, b.name
	ap.childMu.Lock()
	ap.children[an] = b
	ap.childMu.Unlock()
	bp.childMu.Lock()
	bp.children[bn] = a
	bp.childMu.Unlock()
	fs.ancestryMu.Lock()
	a.parent, a.name = bp, bn
	b.parent, b.name = ap, an
	fs.ancestryMu.Unlock()
	// Each parent keeps one child's reference: no change.
}
