package ext4fs

import (
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/ktime"
	"gvisor.dev/gvisor/pkg/sentry/vfs"

	"z.gfire.dev/gvx/core/ext4lite"
)

// statxMask is what stat reports.
const statxMask = linux.STATX_TYPE | linux.STATX_MODE | linux.STATX_NLINK | linux.STATX_UID |
	linux.STATX_GID | linux.STATX_ATIME | linux.STATX_MTIME | linux.STATX_CTIME |
	linux.STATX_INO | linux.STATX_SIZE | linux.STATX_BLOCKS | linux.STATX_BTIME

// stat returns i's attributes.
func (i *inode) stat() (linux.Statx, error) {
	st, err := i.fs.fs.Stat(i.ino)
	if err != nil {
		return linux.Statx{}, errno(err)
	}
	return i.fs.statx(&st), nil
}

// statx converts ext4lite's attributes.
func (fs *filesystem) statx(st *ext4lite.Stat) linux.Statx {
	return linux.Statx{
		Mask:           statxMask,
		Blksize:        uint32(fs.blockSize),
		Nlink:          st.Nlink,
		UID:            st.UID,
		GID:            st.GID,
		Mode:           uint16(st.Mode),
		Ino:            uint64(st.Ino),
		Size:           st.Size,
		Blocks:         st.Blocks,
		Atime:          statxTime(st.Atime),
		Btime:          statxTime(st.Btime),
		Ctime:          statxTime(st.Ctime),
		Mtime:          statxTime(st.Mtime),
		RdevMajor:      st.Rdev.Major,
		RdevMinor:      st.Rdev.Minor,
		DevMajor:       linux.UNNAMED_MAJOR,
		DevMinor:       fs.devMinor,
		AttributesMask: linux.STATX_ATTR_IMMUTABLE | linux.STATX_ATTR_APPEND,
		Attributes:     statxAttributes(st.Flags),
	}
}

// ext4 inode flags that statx reports.
const (
	ext4ImmutableFl = 0x10
	ext4AppendFl    = 0x20
)

func statxAttributes(flags uint32) uint64 {
	var a uint64
	if flags&ext4ImmutableFl != 0 {
		a |= linux.STATX_ATTR_IMMUTABLE
	}
	if flags&ext4AppendFl != 0 {
		a |= linux.STATX_ATTR_APPEND
	}
	return a
}

func statxTime(t ext4lite.Timespec) linux.StatxTimestamp {
	return linux.StatxTimestamp{Sec: t.Sec, Nsec: uint32(t.Nsec)}
}

// timespec converts a time from SetStat, resolving UTIME_NOW.
func timespec(ctx context.Context, t linux.StatxTimestamp) ext4lite.Timespec {
	if t.Nsec == linux.UTIME_NOW {
		sec, nsec := ktime.NowFromContext(ctx).Unix()
		return ext4lite.Timespec{Sec: sec, Nsec: nsec}
	}
	return ext4lite.Timespec{Sec: t.Sec, Nsec: int64(t.Nsec)}
}

// setStat implements chmod, chown, truncate and utimes.
func (i *inode) setStat(ctx context.Context, creds *auth.Credentials, opts *vfs.SetStatOptions, mnt *vfs.Mount) error {
	stat := &opts.Stat
	if stat.Mask == 0 {
		return nil
	}
	const supported = linux.STATX_MODE | linux.STATX_UID | linux.STATX_GID | linux.STATX_ATIME | linux.STATX_MTIME | linux.STATX_CTIME | linux.STATX_SIZE
	if stat.Mask&^supported != 0 {
		return linuxerr.EPERM
	}
	if err := vfs.CheckSetStat(ctx, creds, opts, i.fileMode(), i.accessACL(), i.kuid(), i.kgid()); err != nil {
		return err
	}
	if err := mnt.CheckBeginWrite(); err != nil {
		return err
	}
	defer mnt.EndWrite()

	if stat.Mask&linux.STATX_SIZE != 0 {
		switch i.ftype {
		case linux.S_IFREG:
		case linux.S_IFDIR:
			return linuxerr.EISDIR
		default:
			return linuxerr.EINVAL
		}
		i.ioMu.Lock()
		err := i.truncateLocked(ctx, int64(stat.Size))
		i.ioMu.Unlock()
		if err != nil {
			return err
		}
	}

	i.attrMu.Lock()
	defer i.attrMu.Unlock()
	var a ext4lite.SetAttr
	mode := i.mode.Load()
	newMode := mode
	if stat.Mask&linux.STATX_MODE != 0 {
		perms := uint16(stat.Mode) & linux.PermissionsMask
		if acl := i.accessACL(); acl != nil {
			chmodded := acl.Chmod(perms)
			var equiv bool
			perms, equiv = chmodded.Mode()
			stored := &chmodded
			if equiv {
				stored = nil
			}
			if err := i.writeACL(linux.XATTR_NAME_POSIX_ACL_ACCESS, stored); err != nil {
				return err
			}
			i.acls.access.Store(stored)
		}
		newMode = mode&linux.S_IFMT | uint32(stat.Mode)&^(linux.S_IFMT|linux.PermissionsMask) | uint32(perms)&linux.PermissionsMask
	}
	if opts.ClearPrivs {
		newMode = vfs.ClearSUIDAndSGID(newMode)
	}
	if newMode != mode {
		a.Mask |= ext4lite.SetMode
		a.Mode = newMode &^ linux.S_IFMT
	}
	if stat.Mask&linux.STATX_UID != 0 {
		a.Mask |= ext4lite.SetUID
		a.UID = stat.UID
	}
	if stat.Mask&linux.STATX_GID != 0 {
		a.Mask |= ext4lite.SetGID
		a.GID = stat.GID
	}
	if stat.Mask&linux.STATX_ATIME != 0 {
		a.Mask |= ext4lite.SetAtime
		a.Atime = timespec(ctx, stat.Atime)
	}
	if stat.Mask&linux.STATX_MTIME != 0 {
		a.Mask |= ext4lite.SetMtime
		a.Mtime = timespec(ctx, stat.Mtime)
	}
	if stat.Mask&linux.STATX_CTIME != 0 {
		a.Mask |= ext4lite.SetCtime
		a.Ctime = timespec(ctx, stat.Ctime)
	}
	if a.Mask == 0 {
		return nil
	}
	if err := i.fs.fs.SetAttr(i.ino, a); err != nil {
		return errno(err)
	}
	if a.Mask&ext4lite.SetMode != 0 {
		i.mode.Store(newMode)
	}
	if a.Mask&ext4lite.SetUID != 0 {
		i.uid.Store(a.UID)
	}
	if a.Mask&ext4lite.SetGID != 0 {
		i.gid.Store(a.GID)
	}
	return nil
}

// setModeLocked changes the permission bits of i.
//
// Preconditions: i.attrMu is held.
func (i *inode) setModeLocked(mode uint32) error {
	if err := i.fs.fs.SetAttr(i.ino, ext4lite.SetAttr{Mask: ext4lite.SetMode, Mode: mode &^ linux.S_IFMT}); err != nil {
		return errno(err)
	}
	i.mode.Store(mode)
	return nil
}

// clearSetIDOnChange drops the set-user-ID bit, and the set-group-ID bit
// of a group-executable file, after its data changed, unless the caller
// may keep them (CAP_FSETID), as Linux's file_remove_privs.
func (i *inode) clearSetIDOnChange(ctx context.Context) error {
	mode := i.mode.Load()
	if mode&linux.S_ISUID == 0 && mode&(linux.S_ISGID|linux.ModeGroupExec) != linux.S_ISGID|linux.ModeGroupExec {
		return nil
	}
	creds := auth.CredentialsFromContext(ctx)
	if creds.HasCapabilityOnFile(linux.CAP_FSETID, i.kuid(), i.kgid()) {
		return nil
	}
	i.attrMu.Lock()
	defer i.attrMu.Unlock()
	mode = i.mode.Load()
	if newMode := vfs.ClearSUIDAndSGID(mode); newMode != mode {
		return i.setModeLocked(newMode)
	}
	return nil
}
