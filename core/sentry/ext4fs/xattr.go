package ext4fs

import (
	"strings"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
)

// Extended attributes: user.*, trusted.* (CAP_SYS_ADMIN), security.*
// (readable by all, writable with CAP_SYS_ADMIN; security.capability by
// the owner with CAP_SETFCAP) and the POSIX ACLs system.posix_acl_access
// and system.posix_acl_default, as Linux's ext4 without a security module.

func isACLName(name string) bool {
	return name == linux.XATTR_NAME_POSIX_ACL_ACCESS || name == linux.XATTR_NAME_POSIX_ACL_DEFAULT
}

// checkXattr checks that creds may access attribute name of i as ats
// asks.
func (i *inode) checkXattr(creds *auth.Credentials, ats vfs.AccessTypes, name string) error {
	if len(name) == 0 || len(name) > linux.XATTR_NAME_MAX {
		return linuxerr.ERANGE
	}
	switch {
	case strings.HasPrefix(name, linux.XATTR_TRUSTED_PREFIX):
		return vfs.CheckXattrPermissions(creds, ats, i.fileMode(), i.kuid(), name)
	case strings.HasPrefix(name, linux.XATTR_USER_PREFIX):
		if err := vfs.CheckXattrPermissions(creds, ats, i.fileMode(), i.kuid(), name); err != nil {
			return err
		}
		return i.checkPermissions(creds, ats)
	case strings.HasPrefix(name, linux.XATTR_SECURITY_PREFIX):
		if !ats.MayWrite() {
			return nil
		}
		if name == linux.XATTR_SECURITY_CAPABILITY {
			if !vfs.CanActAsOwner(creds, i.kuid()) || !creds.HasCapabilityOnFile(linux.CAP_SETFCAP, i.kuid(), i.kgid()) {
				return linuxerr.EPERM
			}
			return nil
		}
		if !creds.HasCapabilityOnFile(linux.CAP_SYS_ADMIN, i.kuid(), i.kgid()) {
			return linuxerr.EPERM
		}
		return nil
	}
	return linuxerr.EOPNOTSUPP
}

// listXattr lists the attribute names creds may see.
func (i *inode) listXattr(creds *auth.Credentials) ([]string, error) {
	names, err := i.fs.fs.ListXattr(i.ino)
	if err != nil {
		return nil, errno(err)
	}
	trusted := creds.HasRootCapability(linux.CAP_SYS_ADMIN)
	out := names[:0]
	for _, n := range names {
		if strings.HasPrefix(n, linux.XATTR_TRUSTED_PREFIX) && !trusted {
			continue
		}
		out = append(out, n)
	}
	return out, nil
}

// getXattr returns an attribute's value.
func (i *inode) getXattr(creds *auth.Credentials, opts *vfs.GetXattrOptions) (string, error) {
	if isACLName(opts.Name) {
		return vfs.ACLGetXattr(creds, opts, i.fileMode(), i.accessACL(), i.defaultACL())
	}
	if err := i.checkXattr(creds, vfs.MayRead, opts.Name); err != nil {
		return "", err
	}
	v, err := i.fs.fs.GetXattr(i.ino, opts.Name)
	if err != nil {
		return "", errno(err)
	}
	if opts.Size != 0 && uint64(len(v)) > opts.Size {
		return "", linuxerr.ERANGE
	}
	return string(v), nil
}

// setXattr sets an attribute.
func (i *inode) setXattr(creds *auth.Credentials, opts *vfs.SetXattrOptions) error {
	if opts.Flags&^(linux.XATTR_CREATE|linux.XATTR_REPLACE) != 0 {
		return linuxerr.EINVAL
	}
	if isACLName(opts.Name) {
		acl, t, err := vfs.ACLSetXattr(creds, opts, i.fileMode(), i.kuid())
		if err != nil {
			return err
		}
		_, _, err = i.setPosixACL(creds, t, acl, true /* clearSGID */)
		return err
	}
	if err := i.checkXattr(creds, vfs.MayWrite, opts.Name); err != nil {
		return err
	}
	if len(opts.Value) > linux.XATTR_SIZE_MAX {
		return linuxerr.E2BIG
	}
	return errno(i.fs.fs.SetXattr(i.ino, opts.Name, []byte(opts.Value), int(opts.Flags)))
}

// removeXattr removes an attribute.
func (i *inode) removeXattr(creds *auth.Credentials, name string) error {
	if isACLName(name) {
		t, err := vfs.ACLRemoveXattr(creds, name, i.fileMode(), i.kuid())
		if err != nil {
			return err
		}
		_, _, err = i.setPosixACL(creds, t, nil, true /* clearSGID */)
		return err
	}
	if err := i.checkXattr(creds, vfs.MayWrite, name); err != nil {
		return err
	}
	err := i.fs.fs.RemoveXattr(i.ino, name)
	if isErrno(err, unix.ENODATA) {
		return linuxerr.ENODATA
	}
	return errno(err)
}

// getPosixACL returns one of i's ACLs, for the Sentry's own callers.
func (i *inode) getPosixACL(t vfs.ACLType) (*vfs.PosixACL, error) {
	switch t {
	case vfs.AccessACL:
		return i.accessACL(), nil
	case vfs.DefaultACL:
		return i.defaultACL(), nil
	}
	return nil, linuxerr.EINVAL
}
