package sentry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/abi/linux"
	gcontext "gvisor.dev/gvisor/pkg/context"
	gerrors "gvisor.dev/gvisor/pkg/errors"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/fspath"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
	"gvisor.dev/gvisor/pkg/usermem"
)

// File access from the host goes through the kernel's VFS as guest root,
// resolving paths (and symlinks) inside the guest's root filesystem, so it
// can never reach a host file. It works before Start and after lockdown.

// File is a file in the sandbox opened by Sandbox.Open. Closing the
// sandbox closes it.
type File struct {
	s    *Sandbox
	name string

	mu sync.Mutex
	fd *vfs.FileDescription // nil once closed
}

// Open opens the regular file at the absolute guest path name for reading.
func (s *Sandbox) Open(ctx context.Context, name string) (*File, error) {
	if err := s.acquire(); err != nil {
		return nil, err
	}
	defer s.release()
	fd, err := s.openAt(name, linux.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	f := &File{s: s, name: name, fd: fd}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files == nil {
		// Close began while the file was opened: it waits for this
		// call, but no longer tracks files to close.
		fd.DecRef(s.k.SupervisorContext())
		return nil, ErrClosed
	}
	s.files[f] = struct{}{}
	return f, nil
}

// Read implements io.Reader.
func (f *File) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fd == nil {
		return 0, fs.ErrClosed
	}
	n, err := f.fd.Read(f.s.k.SupervisorContext(), usermem.BytesIOSequence(b), vfs.ReadOptions{})
	if err == io.EOF {
		return int(n), io.EOF
	}
	if err != nil {
		return int(n), &fs.PathError{Op: "read", Path: f.name, Err: hostError(err)}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return int(n), nil
}

// Stat returns the file's metadata.
func (f *File) Stat() (fs.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fd == nil {
		return nil, fs.ErrClosed
	}
	st, err := f.fd.Stat(f.s.k.SupervisorContext(), vfs.StatOptions{Mask: linux.STATX_ALL})
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: f.name, Err: hostError(err)}
	}
	return newFileInfo(path.Base(f.name), &st), nil
}

// Close releases the file.
func (f *File) Close() error {
	f.s.mu.Lock()
	delete(f.s.files, f)
	f.s.mu.Unlock()
	f.close()
	return nil
}

// close drops the file's reference, once.
func (f *File) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fd != nil {
		f.fd.DecRef(f.s.k.SupervisorContext())
		f.fd = nil
	}
}

// ReadFile returns the content of the regular file at the absolute guest
// path name.
func (s *Sandbox) ReadFile(ctx context.Context, name string) ([]byte, error) {
	f, err := s.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// Owner is who a file the host writes belongs to in the guest. (rungv
// resolves user and group names against the guest's /etc/passwd and
// /etc/group, as it does for an exec's user.)
type Owner struct {
	UID, GID uint32
}

// WriteFile writes data to the absolute guest path name as root, as
// WriteFileFrom does.
func (s *Sandbox) WriteFile(ctx context.Context, name string, data []byte, perm fs.FileMode) error {
	_, err := s.WriteFileFrom(ctx, name, bytes.NewReader(data), perm, nil)
	return err
}

// WriteFileFrom writes the content read from r to the absolute guest path
// name, reading it as it is written, so a large file is never held in
// memory. It returns the bytes written. Root writes the file; it belongs to
// owner, or to root if owner is nil.
//
// The file appears whole or not at all: the content goes to a hidden file
// beside name, which is renamed over name once r reached its end. If r
// fails, or the sandbox runs out of space, that file is removed and name
// keeps what it held (or stays absent); replacing a file needs room for
// both until then. The result is always a new file with exactly mode perm
// (no umask applies): a file it replaces keeps neither its mode nor its
// owner, and its other hard links keep the old content. A symlink at name
// is followed, as open(2) follows it, and its target replaced; an existing
// directory, FIFO or device is refused.
func (s *Sandbox) WriteFileFrom(ctx context.Context, name string, r io.Reader, perm fs.FileMode, owner *Owner) (int64, error) {
	if err := s.acquire(); err != nil {
		return 0, err
	}
	defer s.release()
	kctx, root, err := s.fileRoot(name)
	if err != nil {
		return 0, err
	}
	defer root.DecRef(kctx)
	creds := s.rootCreds()
	dir, base, err := s.writeTarget(kctx, creds, root, name)
	if err != nil {
		return 0, err
	}
	defer dir.DecRef(kctx)
	at := func(file string) *vfs.PathOperation {
		return &vfs.PathOperation{Root: root, Start: dir, Path: fspath.Parse(file)}
	}
	vfsObj := s.k.VFS()
	tmp := tempName(base)
	fd, err := vfsObj.OpenAt(kctx, creds, at(tmp), &vfs.OpenOptions{Flags: linux.O_WRONLY | linux.O_CREAT | linux.O_EXCL, Mode: linux.FileMode(perm.Perm())})
	if err != nil {
		return 0, pathError("create", name, err)
	}
	defer fd.DecRef(kctx)
	renamed := false
	defer func() {
		if !renamed {
			// The error being returned says what failed; this one would
			// not add to it, and the file is hidden.
			_ = vfsObj.UnlinkAt(kctx, creds, at(tmp))
		}
	}()
	n, err := copyToFD(kctx, fd, name, r, make([]byte, copyBufSize))
	if err != nil {
		return n, err
	}
	if owner != nil {
		// Made by root and given away, rather than made with the owner's
		// IDs: the owner's group is then exactly the one asked for, even in
		// a set-group-ID directory.
		st := linux.Statx{Mask: linux.STATX_UID | linux.STATX_GID, UID: owner.UID, GID: owner.GID}
		if err := fd.SetStat(kctx, vfs.SetStatOptions{Stat: st}); err != nil {
			return n, pathError("chown", name, err)
		}
	}
	if err := vfsObj.RenameAt(kctx, creds, at(tmp), at(base), &vfs.RenameOptions{}); err != nil {
		return n, pathError("rename", name, err)
	}
	renamed = true
	return n, nil
}

// writeTarget returns the directory and the name in it of the file that
// writing name replaces: name with its final symlinks followed, as open(2)
// follows them, so that writing through a symlink replaces its target (or
// makes it), not the link. The caller owns a reference on the directory.
func (s *Sandbox) writeTarget(ctx gcontext.Context, creds *auth.Credentials, root vfs.VirtualDentry, name string) (vfs.VirtualDentry, string, error) {
	// Each symlink's target is resolved from the directory holding the
	// link, as the kernel resolves it, never by joining path strings: that
	// directory may itself have been reached through symlinks.
	start, next := root, name
	ownStart := false // whether start is a reference of ours
	for hops := 0; ; hops++ {
		dirPath, base := path.Split(next)
		if dirPath == "" {
			dirPath = "."
		}
		dir, err := s.k.VFS().GetDentryAt(ctx, creds, &vfs.PathOperation{Root: root, Start: start, Path: fspath.Parse(dirPath), FollowFinalSymlink: true}, &vfs.GetDentryOptions{CheckSearchable: true})
		if ownStart {
			start.DecRef(ctx)
		}
		if err != nil {
			return vfs.VirtualDentry{}, "", pathError("open", name, err)
		}
		target, isLink, err := s.replaceable(ctx, creds, root, dir, base, name)
		if err == nil && isLink && hops == linux.MaxSymlinkTraversals {
			err = pathError("open", name, linuxerr.ELOOP)
		}
		if err != nil {
			dir.DecRef(ctx)
			return vfs.VirtualDentry{}, "", err
		}
		if !isLink {
			return dir, base, nil
		}
		start, next, ownStart = dir, target, true
	}
}

// replaceable checks that the file base in dir, if there is one, may be
// replaced by a regular file written to name, and returns its target if it
// is a symlink. A directory, FIFO or device is refused: replacing one with
// a file is never what was meant.
func (s *Sandbox) replaceable(ctx gcontext.Context, creds *auth.Credentials, root, dir vfs.VirtualDentry, base, name string) (target string, isLink bool, err error) {
	if base == "" || base == "." || base == ".." {
		return "", false, pathError("open", name, linuxerr.EISDIR)
	}
	at := &vfs.PathOperation{Root: root, Start: dir, Path: fspath.Parse(base)}
	st, err := s.k.VFS().StatAt(ctx, creds, at, &vfs.StatOptions{Mask: linux.STATX_TYPE | linux.STATX_MODE})
	switch {
	case linuxerr.Equals(linuxerr.ENOENT, err):
		return "", false, nil
	case err != nil:
		return "", false, pathError("stat", name, err)
	}
	switch st.Mode & linux.S_IFMT {
	case linux.S_IFREG:
		return "", false, nil
	case linux.S_IFLNK:
		target, err := s.k.VFS().ReadlinkAt(ctx, creds, at)
		if err != nil {
			return "", false, pathError("readlink", name, err)
		}
		return target, true, nil
	case linux.S_IFDIR:
		return "", false, pathError("open", name, linuxerr.EISDIR)
	}
	return "", false, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("not a regular file (mode %#o)", st.Mode)}
}

// tempName returns a hidden name for new content on its way to base, in
// base's directory (a rename does not cross file systems), within
// NAME_MAX.
func tempName(base string) string {
	suffix := fmt.Sprintf(".gvx-%016x", rand.Uint64())
	if room := linux.NAME_MAX - 1 - len(suffix); len(base) > room {
		base = base[:room]
	}
	return "." + base + suffix
}

// Stat returns the metadata of the file at the absolute guest path name,
// following symlinks.
func (s *Sandbox) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	if err := s.acquire(); err != nil {
		return nil, err
	}
	defer s.release()
	kctx, root, err := s.fileRoot(name)
	if err != nil {
		return nil, err
	}
	defer root.DecRef(kctx)
	st, err := s.k.VFS().StatAt(kctx, s.rootCreds(), pathAt(root, name, true), &vfs.StatOptions{Mask: linux.STATX_ALL})
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: hostError(err)}
	}
	return newFileInfo(path.Base(name), &st), nil
}

// openAt opens name in the guest. Opening non-regular files is refused:
// a FIFO would block and a device such as /dev/zero never ends.
func (s *Sandbox) openAt(name string, flags uint32, mode uint16) (*vfs.FileDescription, error) {
	kctx, root, err := s.fileRoot(name)
	if err != nil {
		return nil, err
	}
	defer root.DecRef(kctx)
	fd, err := s.k.VFS().OpenAt(kctx, s.rootCreds(), pathAt(root, name, true), &vfs.OpenOptions{Flags: flags | linux.O_NONBLOCK | linux.O_NOCTTY, Mode: linux.FileMode(mode)})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: hostError(err)}
	}
	st, err := fd.Stat(kctx, vfs.StatOptions{Mask: linux.STATX_TYPE})
	if err != nil {
		fd.DecRef(kctx)
		return nil, &fs.PathError{Op: "stat", Path: name, Err: hostError(err)}
	}
	if st.Mode&linux.S_IFMT != linux.S_IFREG {
		fd.DecRef(kctx)
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("not a regular file (mode %#o)", st.Mode)}
	}
	return fd, nil
}

// pathAt is the path operation on name resolved from root (a mount
// namespace's root, so an absolute name stays inside it).
func pathAt(root vfs.VirtualDentry, name string, followFinalSymlink bool) *vfs.PathOperation {
	return &vfs.PathOperation{Root: root, Start: root, Path: fspath.Parse(name), FollowFinalSymlink: followFinalSymlink}
}

// errNotAbsolute refuses a relative guest path: there is no working
// directory to resolve it from.
var errNotAbsolute = fmt.Errorf("%w: a guest path is absolute, like /workspace/file", fs.ErrInvalid)

// fileRoot checks name and returns the kernel context and the guest's root.
// The context carries the guest's mount namespace, which renames and
// unlinks consult for mount points: the kernel's own context has none
// before Start, when rungv already writes files.
//
// Preconditions: the caller holds a use of s (acquire).
func (s *Sandbox) fileRoot(name string) (gcontext.Context, vfs.VirtualDentry, error) {
	if !path.IsAbs(name) {
		return nil, vfs.VirtualDentry{}, &fs.PathError{Op: "open", Path: name, Err: errNotAbsolute}
	}
	kctx := vfs.WithMountNamespace(s.k.SupervisorContext(), s.mns)
	return kctx, s.mns.Root(kctx), nil
}

// acquire registers a host-side operation on the kernel, which Close waits
// for before it releases the kernel.
func (s *Sandbox) acquire() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateClosed {
		return ErrClosed
	}
	s.users.Add(1)
	return nil
}

// release ends an operation registered by acquire.
func (s *Sandbox) release() { s.users.Done() }

func (s *Sandbox) rootCreds() *auth.Credentials {
	return auth.NewRootCredentials(s.k.RootUserNamespace())
}

// ownerCreds returns credentials whose new files belong to owner, as Linux
// gives a new file its creator's IDs, and which may make them wherever
// root may: root's capabilities under owner's IDs. A nil owner is root.
func (s *Sandbox) ownerCreds(owner *Owner) *auth.Credentials {
	if owner == nil {
		return s.rootCreds()
	}
	caps := &auth.TaskCapabilities{PermittedCaps: auth.AllCapabilities, EffectiveCaps: auth.AllCapabilities, BoundingCaps: auth.AllCapabilities}
	return auth.NewUserCredentials(auth.KUID(owner.UID), auth.KGID(owner.GID), nil, caps, s.k.RootUserNamespace())
}

// hostError converts a Sentry error to the host's errno type, so callers
// can use errors.Is(err, fs.ErrNotExist) and friends.
func hostError(err error) error {
	var e *gerrors.Error
	if errors.As(err, &e) {
		return linuxerr.ToUnix(e)
	}
	return err
}

// FileStat is the part of a guest file's metadata that fs.FileInfo lacks;
// it is the Sys() of the FileInfo values returned here.
type FileStat struct {
	// Mode is st_mode: the file type and permission bits.
	Mode     uint32
	UID, GID uint32
	Inode    uint64
	Nlink    uint32
	// Rdev is the device number of a device file, as unix.Mkdev encodes it.
	Rdev uint64
}

// fileInfo implements fs.FileInfo.
type fileInfo struct {
	name string
	size int64
	mode fs.FileMode
	mod  time.Time
	sys  FileStat
}

var _ fs.FileInfo = (*fileInfo)(nil)

func newFileInfo(name string, st *linux.Statx) *fileInfo {
	return &fileInfo{
		name: name,
		size: int64(st.Size),
		mode: fileMode(uint32(st.Mode)),
		mod:  time.Unix(st.Mtime.Sec, int64(st.Mtime.Nsec)),
		sys: FileStat{
			Mode:  uint32(st.Mode),
			UID:   st.UID,
			GID:   st.GID,
			Inode: st.Ino,
			Nlink: st.Nlink,
			Rdev:  unix.Mkdev(st.RdevMajor, st.RdevMinor),
		},
	}
}

func (fi *fileInfo) Name() string       { return fi.name }
func (fi *fileInfo) Size() int64        { return fi.size }
func (fi *fileInfo) Mode() fs.FileMode  { return fi.mode }
func (fi *fileInfo) ModTime() time.Time { return fi.mod }
func (fi *fileInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi *fileInfo) Sys() any           { return &fi.sys }

// fileMode converts a Linux st_mode to an fs.FileMode.
func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & linux.S_IFMT {
	case linux.S_IFDIR:
		mode |= fs.ModeDir
	case linux.S_IFLNK:
		mode |= fs.ModeSymlink
	case linux.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case linux.S_IFSOCK:
		mode |= fs.ModeSocket
	case linux.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case linux.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if m&linux.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&linux.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&linux.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}
