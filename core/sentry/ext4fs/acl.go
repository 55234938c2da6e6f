package ext4fs

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
)

// aclCache holds an inode's POSIX ACLs, read from its
// system.posix_acl_access and system.posix_acl_default attributes the
// first time a permission check needs them.
type aclCache struct {
	once       sync.Once
	access     atomic.Pointer[vfs.PosixACL]
	defaultACL atomic.Pointer[vfs.PosixACL]
}

// loadACLs reads i's ACLs once. An ACL that cannot be read or parsed is
// treated as absent (the mode bits still apply) and logged.
func (i *inode) loadACLs() {
	i.acls.once.Do(func() {
		if i.isSymlink() {
			return
		}
		i.acls.access.Store(i.readACL(linux.XATTR_NAME_POSIX_ACL_ACCESS))
		if i.isDir() {
			i.acls.defaultACL.Store(i.readACL(linux.XATTR_NAME_POSIX_ACL_DEFAULT))
		}
	})
}

func (i *inode) readACL(name string) *vfs.PosixACL {
	v, err := i.fs.fs.GetXattr(i.ino, name)
	if err != nil {
		if !isErrno(err, unix.ENODATA) {
			log.Warningf("ext4fs: reading %s of inode %d: %v", name, i.ino, err)
		}
		return nil
	}
	acl, err := vfs.ParsePosixACL(v, i.fs.rootNS)
	if err != nil {
		log.Warningf("ext4fs: inode %d has an unusable %s: %v", i.ino, name, err)
		return nil
	}
	return acl
}

// knownACLs records the ACLs of a file this package just created, so the
// first permission check need not read them back.
func (i *inode) knownACLs(access, def *vfs.PosixACL) {
	i.acls.once.Do(func() {
		i.acls.access.Store(access)
		if i.isDir() {
			i.acls.defaultACL.Store(def)
		}
	})
}

// accessACL returns i's access ACL, or nil.
func (i *inode) accessACL() *vfs.PosixACL {
	i.loadACLs()
	return i.acls.access.Load()
}

// defaultACL returns i's default ACL, or nil.
func (i *inode) defaultACL() *vfs.PosixACL {
	i.loadACLs()
	return i.acls.defaultACL.Load()
}

// writeACL stores acl (nil removes it) as attribute name.
func (i *inode) writeACL(name string, acl *vfs.PosixACL) error {
	if acl == nil {
		err := i.fs.fs.RemoveXattr(i.ino, name)
		if err != nil && !isErrno(err, unix.ENODATA) {
			return errno(err)
		}
		return nil
	}
	return errno(i.fs.fs.SetXattr(i.ino, name, acl.Serialize(i.fs.rootNS), 0))
}

// setPosixACL sets one of i's ACLs. For the access ACL the mode's
// permission bits follow the ACL, and an ACL the mode expresses exactly is
// not stored. It returns the ACL now in effect and the new mode.
func (i *inode) setPosixACL(creds *auth.Credentials, t vfs.ACLType, acl *vfs.PosixACL, clearSGID bool) (*vfs.PosixACL, linux.FileMode, error) {
	i.loadACLs()
	i.attrMu.Lock()
	defer i.attrMu.Unlock()
	switch t {
	case vfs.AccessACL:
		perms, equiv := uint16(i.mode.Load()), true
		if acl != nil {
			perms, equiv = acl.Mode()
		}
		old := i.mode.Load()
		newMode := old&^linux.PermissionsMask | uint32(perms)&linux.PermissionsMask
		if clearSGID && vfs.ShouldClearSGID(creds, linux.FileMode(newMode), i.kuid(), i.kgid()) {
			newMode &^= linux.S_ISGID
		}
		if newMode != old {
			if err := i.setModeLocked(newMode); err != nil {
				return nil, 0, err
			}
		}
		stored := acl
		if equiv {
			stored = nil
		}
		if err := i.writeACL(linux.XATTR_NAME_POSIX_ACL_ACCESS, stored); err != nil {
			return nil, 0, err
		}
		i.acls.access.Store(stored)
		return stored, linux.FileMode(newMode), nil
	case vfs.DefaultACL:
		if !i.isDir() {
			if acl != nil {
				return nil, 0, linuxerr.EACCES
			}
			return nil, i.fileMode(), nil
		}
		if err := i.writeACL(linux.XATTR_NAME_POSIX_ACL_DEFAULT, acl); err != nil {
			return nil, 0, err
		}
		i.acls.defaultACL.Store(acl)
		return acl, i.fileMode(), nil
	}
	return nil, 0, linuxerr.EOPNOTSUPP
}
