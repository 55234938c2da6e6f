package ext4fs

import (
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/vfs"

	"z.gfire.dev/gvx/core/ext4lite"
)

// newFile describes a file about to be created: its owner and mode after
// setgid inheritance, and the ACLs it inherits from its directory.
type newFile struct {
	owner      ext4lite.Owner
	mode       linux.FileMode // type and permission bits
	accessACL  *vfs.PosixACL
	defaultACL *vfs.PosixACL
}

// prepareNewFile applies what Linux's inode_init_owner and
// posix_acl_create do for a file of mode created by creds in dir: a setgid
// directory passes on its group (and, to directories, the setgid bit); a
// setgid bit the creator may not set is dropped; a default ACL masks the
// mode and becomes the new file's ACLs.
func prepareNewFile(creds *auth.Credentials, dir *inode, mode linux.FileMode) newFile {
	nf := newFile{
		owner: ext4lite.Owner{UID: uint32(creds.EffectiveKUID), GID: uint32(creds.EffectiveKGID)},
		mode:  mode,
	}
	isDir := mode.FileType() == linux.ModeDirectory
	if dir.fileMode()&linux.S_ISGID != 0 {
		nf.owner.GID = dir.gid.Load()
		if isDir {
			nf.mode |= linux.S_ISGID
		}
	}
	if !isDir && nf.mode&(linux.S_ISGID|linux.ModeGroupExec) == linux.S_ISGID|linux.ModeGroupExec &&
		!creds.InGroup(auth.KGID(nf.owner.GID)) &&
		!creds.HasCapabilityOnFile(linux.CAP_FSETID, dir.kuid(), dir.kgid()) {
		nf.mode &^= linux.S_ISGID
	}
	if mode.FileType() == linux.ModeSymlink {
		return nf
	}
	if def := dir.defaultACL(); def != nil {
		acl := def.MaskNewFileMode(uint16(nf.mode))
		perms, equiv := acl.Mode()
		nf.mode = nf.mode&^linux.PermissionsMask | linux.FileMode(perms)&linux.PermissionsMask
		if !equiv {
			nf.accessACL = &acl
		}
		if isDir {
			nf.defaultACL = def
		}
	}
	return nf
}

// applyACLs stores the ACLs a new file inherited. A failure is logged: the
// file exists and its mode already carries the inherited permissions.
func (nf *newFile) applyACLs(fs *filesystem, ino ext4lite.Ino) {
	for _, a := range []struct {
		name string
		acl  *vfs.PosixACL
	}{{linux.XATTR_NAME_POSIX_ACL_ACCESS, nf.accessACL}, {linux.XATTR_NAME_POSIX_ACL_DEFAULT, nf.defaultACL}} {
		if a.acl == nil {
			continue
		}
		if err := fs.fs.SetXattr(ino, a.name, a.acl.Serialize(fs.rootNS), 0); err != nil {
			log.Warningf("ext4fs: storing the inherited %s of inode %d: %v", a.name, ino, err)
		}
	}
}

// doCreateAt checks that a file may be created at rp and calls create to
// make it, with fs.mu held for reading and the parent's children locked
// against concurrent lookups of the name.
//
// Preconditions: !rp.Done(); for the final component,
// !rp.ShouldFollowSymlink().
func (fs *filesystem) doCreateAt(ctx context.Context, rp *vfs.ResolvingPath, dir bool, create func(parent *dentry, name string) error) error {
	defer fs.maybeEvict(ctx)
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	parent, err := fs.walkParentDirLocked(ctx, rp, rp.Start().Impl().(*dentry))
	if err != nil {
		return err
	}
	// As Linux: searchability, then existence, then a writable mount,
	// then write permission.
	if err := parent.inode.checkPermissions(rp.Credentials(), vfs.MayExec); err != nil {
		return err
	}
	name := rp.Component()
	if name == "." || name == ".." {
		return linuxerr.EEXIST
	}
	if len(name) > linux.NAME_MAX {
		return linuxerr.ENAMETOOLONG
	}
	if exists, err := fs.existsLocked(parent, name); err != nil {
		return err
	} else if exists {
		return linuxerr.EEXIST
	}
	if !dir && rp.MustBeDir() {
		return linuxerr.ENOENT
	}
	if parent.removed.Load() {
		return linuxerr.ENOENT
	}
	mnt := rp.Mount()
	if err := mnt.CheckBeginWrite(); err != nil {
		return err
	}
	defer mnt.EndWrite()
	if err := parent.inode.checkPermissions(rp.Credentials(), vfs.MayWrite); err != nil {
		return err
	}
	if err := create(parent, name); err != nil {
		return err
	}
	ev := uint32(linux.IN_CREATE)
	if dir {
		ev |= linux.IN_ISDIR
	}
	parent.inode.watches.Notify(ctx, name, ev, 0, vfs.InodeEvent, false /* unlinked */)
	return nil
}

// MkdirAt implements vfs.FilesystemImpl.MkdirAt.
func (fs *filesystem) MkdirAt(ctx context.Context, rp *vfs.ResolvingPath, opts vfs.MkdirOptions) error {
	return fs.doCreateAt(ctx, rp, true /* dir */, func(parent *dentry, name string) error {
		nf := prepareNewFile(rp.Credentials(), parent.inode, opts.Mode&^linux.S_IFMT|linux.ModeDirectory)
		ino, err := fs.fs.Mkdir(parent.inode.ino, name, uint32(nf.mode.Permissions()|nf.mode&(linux.S_ISUID|linux.S_ISGID|linux.S_ISVTX)), nf.owner)
		if err != nil {
			return errno(err)
		}
		nf.applyACLs(fs, ino)
		return nil
	})
}

// MknodAt implements vfs.FilesystemImpl.MknodAt.
func (fs *filesystem) MknodAt(ctx context.Context, rp *vfs.ResolvingPath, opts vfs.MknodOptions) error {
	return fs.doCreateAt(ctx, rp, false /* dir */, func(parent *dentry, name string) error {
		switch opts.Mode.FileType() {
		case linux.ModeRegular, linux.ModeNamedPipe, linux.ModeCharacterDevice, linux.ModeBlockDevice, linux.ModeSocket:
		case 0:
			opts.Mode |= linux.ModeRegular
		default:
			return linuxerr.EINVAL
		}
		nf := prepareNewFile(rp.Credentials(), parent.inode, opts.Mode)
		ino, err := fs.fs.Mknod(parent.inode.ino, name, uint32(nf.mode), ext4lite.Dev{Major: opts.DevMajor, Minor: opts.DevMinor}, nf.owner)
		if err != nil {
			return errno(err)
		}
		nf.applyACLs(fs, ino)
		if opts.Mode.FileType() == linux.ModeSocket && opts.Endpoint != nil {
			fs.endpointsMu.Lock()
			fs.endpoints[ino] = opts.Endpoint
			fs.endpointsMu.Unlock()
		}
		return nil
	})
}

// SymlinkAt implements vfs.FilesystemImpl.SymlinkAt.
func (fs *filesystem) SymlinkAt(ctx context.Context, rp *vfs.ResolvingPath, target string) error {
	return fs.doCreateAt(ctx, rp, false /* dir */, func(parent *dentry, name string) error {
		if len(target) >= linux.PATH_MAX {
			return linuxerr.ENAMETOOLONG
		}
		nf := prepareNewFile(rp.Credentials(), parent.inode, linux.ModeSymlink|0o777)
		_, err := fs.fs.Symlink(parent.inode.ino, name, target, nf.owner)
		return errno(err)
	})
}

// LinkAt implements vfs.FilesystemImpl.LinkAt.
func (fs *filesystem) LinkAt(ctx context.Context, rp *vfs.ResolvingPath, vd vfs.VirtualDentry) error {
	return fs.doCreateAt(ctx, rp, false /* dir */, func(parent *dentry, name string) error {
		if rp.Mount() != vd.Mount() {
			return linuxerr.EXDEV
		}
		d := vd.Dentry().Impl().(*dentry)
		i := d.inode
		if i.isDir() {
			return linuxerr.EPERM
		}
		if err := vfs.MayLink(auth.CredentialsFromContext(ctx), i.fileMode(), i.accessACL(), i.kuid(), i.kgid()); err != nil {
			return err
		}
		if i.noLink {
			return linuxerr.ENOENT
		}
		st, err := fs.fs.Stat(i.ino)
		if err != nil {
			return errno(err)
		}
		if st.Nlink == 0 && !d.isTmpfile() {
			return linuxerr.ENOENT
		}
		if err := fs.fs.Link(parent.inode.ino, name, i.ino); err != nil {
			return errno(err)
		}
		i.watches.Notify(ctx, "", linux.IN_ATTRIB, 0, vfs.InodeEvent, false /* unlinked */)
		return nil
	})
}
