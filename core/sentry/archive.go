package sentry

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"gvisor.dev/gvisor/pkg/abi/linux"
	gcontext "gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
	"gvisor.dev/gvisor/pkg/usermem"

	"z.gfire.dev/gvx/core/internal/sparsetar"
)

// Directory trees move in and out of a sandbox as tar streams, handled by
// the Sentry's VFS as guest root, like the single-file operations in
// files.go: a command inside the guest is never needed (so an image
// without tar works, and no process per file is paid), and every path
// resolves inside the guest's root, so no entry can reach a host file.

// ErrBadArchive is what CopyIn's errors about the archive itself match
// (errors.Is): a broken stream, an entry that climbs out of the
// destination or that the destination's files are in the way of.
var ErrBadArchive = errors.New("bad archive")

// badArchive returns an error matching ErrBadArchive.
func badArchive(format string, args ...any) error {
	return &archiveError{fmt.Errorf(format, args...)}
}

type archiveError struct{ err error }

func (e *archiveError) Error() string        { return e.err.Error() }
func (e *archiveError) Unwrap() error        { return e.err }
func (e *archiveError) Is(target error) bool { return target == ErrBadArchive }

// copyBufSize is the buffer one copy moves files' content through.
const copyBufSize = 256 << 10

// CopyStats counts what a copy moved.
type CopyStats struct {
	// Entries counts the files, directories, links and nodes.
	Entries int64
	// Bytes counts the regular files' content.
	Bytes int64
}

// CopyIn extracts the tar stream r into the absolute guest directory dir,
// which is created (with its parents, mode 0755) if missing. Entries keep
// the archive's modes, owners and modification times (a symlink's too),
// and a sparse entry's holes stay holes; an existing
// non-directory is replaced, an existing directory is kept and updated.
// Entry names are relative to dir: a leading "/" is dropped, and a name
// that climbs out of dir with ".." is refused.
//
// A non-nil owner owns every entry instead of the archive's owners, and
// the directories made on the way (dir, its missing parents and the
// entries' missing parents), which are otherwise root's.
func (s *Sandbox) CopyIn(ctx context.Context, dir string, r io.Reader, owner *Owner) (CopyStats, error) {
	if err := s.acquire(); err != nil {
		return CopyStats{}, err
	}
	defer s.release()
	kctx, root, err := s.fileRoot(dir)
	if err != nil {
		return CopyStats{}, err
	}
	defer root.DecRef(kctx)
	x := extractor{s: s, ctx: kctx, creds: s.rootCreds(), owner: owner, parentCreds: s.ownerCreds(owner), root: root, dirs: map[string]bool{}, buf: make([]byte, copyBufSize)}
	dir = path.Clean(dir)
	if err := x.mkdirAll(dir); err != nil {
		return CopyStats{}, err
	}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return x.stats, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return x.stats, badArchive("reading the tar stream after %d entries: %w", x.stats.Entries, err)
		}
		if err := x.extract(dir, hdr, tr); err != nil {
			return x.stats, err
		}
	}
	// Directory times last: every entry created in a directory changed
	// its modification time.
	for i := len(x.dirTimes) - 1; i >= 0; i-- {
		d := x.dirTimes[i]
		if err := x.setTimes(d.name, d.mtime); err != nil {
			return x.stats, err
		}
	}
	return x.stats, nil
}

// MkdirAll makes the absolute guest directory name and its missing
// parents (mode 0755), as `mkdir -p` does; existing directories are kept.
// The directories it makes belong to owner, or to root if owner is nil,
// as those of `mkdir -p` run by owner would (a set-group-ID parent passes
// on its group).
func (s *Sandbox) MkdirAll(ctx context.Context, name string, owner *Owner) error {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.release()
	kctx, root, err := s.fileRoot(name)
	if err != nil {
		return err
	}
	defer root.DecRef(kctx)
	return mkdirAll(kctx, s.k.VFS(), s.ownerCreds(owner), root, path.Clean(name))
}

// mkdirAll is vfs.MkdirAllAt with the path in its error.
func mkdirAll(ctx gcontext.Context, vfsObj *vfs.VirtualFilesystem, creds *auth.Credentials, root vfs.VirtualDentry, name string) error {
	if err := vfsObj.MkdirAllAt(ctx, name, root, creds, &vfs.MkdirOptions{Mode: 0o755}, true /* mustBeDir */); err != nil {
		return pathError("mkdir", name, err)
	}
	return nil
}

// extractor holds the state of one CopyIn.
type extractor struct {
	s     *Sandbox
	ctx   gcontext.Context
	creds *auth.Credentials
	// owner, if not nil, replaces the archive's owners.
	owner *Owner
	// parentCreds make the missing directories, so that they are owner's.
	parentCreds *auth.Credentials
	root        vfs.VirtualDentry
	stats       CopyStats
	dirTimes    []dirTime
	// dirs are the directories known to exist: archives need not hold an
	// entry for every parent, and most entries share theirs.
	dirs map[string]bool
	buf  []byte // for files' content
}

type dirTime struct {
	name  string
	mtime time.Time
}

// entryPath returns the guest path of a tar entry extracted into dir.
func entryPath(dir, name string) (string, error) {
	rel := strings.TrimLeft(name, "/")
	if rel == "" {
		return dir, nil
	}
	clean := path.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", badArchive("tar entry %q climbs out of the destination directory %s; make the archive's names relative to its top (tar -C DIR .)", name, dir)
	}
	return path.Join(dir, clean), nil
}

// extract makes the file of one tar entry, then gives it the entry's
// owner, mode and times as far as its type has them.
func (x *extractor) extract(dir string, hdr *tar.Header, content io.Reader) error {
	name, err := entryPath(dir, hdr.Name)
	if err != nil {
		return err
	}
	if name != dir {
		if err := x.mkdirAll(path.Dir(name)); err != nil {
			return err
		}
	}
	mode := uint16(hdr.Mode & 0o7777)
	vfsObj := x.s.k.VFS()
	switch hdr.Typeflag {
	case tar.TypeDir:
		err = x.mkdir(name, mode)
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		err = x.writeFile(name, mode, content, sparsetar.IsSparse(hdr))
	case tar.TypeSymlink:
		if err = x.replace(name); err == nil {
			if err = vfsObj.SymlinkAt(x.ctx, x.creds, pathAt(x.root, name, false), hdr.Linkname); err != nil {
				err = pathError("symlink", name, err)
			}
		}
	case tar.TypeLink:
		var target string
		if target, err = entryPath(dir, hdr.Linkname); err == nil {
			if err = x.replace(name); err == nil {
				if err = vfsObj.LinkAt(x.ctx, x.creds, pathAt(x.root, target, false), pathAt(x.root, name, false)); err != nil {
					err = pathError("link", name, err)
				}
			}
		}
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := map[byte]linux.FileMode{tar.TypeChar: linux.S_IFCHR, tar.TypeBlock: linux.S_IFBLK, tar.TypeFifo: linux.S_IFIFO}[hdr.Typeflag]
		opts := &vfs.MknodOptions{Mode: kind | linux.FileMode(mode), DevMajor: uint32(hdr.Devmajor), DevMinor: uint32(hdr.Devminor)}
		if err = x.replace(name); err == nil {
			if err = vfsObj.MknodAt(x.ctx, x.creds, pathAt(x.root, name, false), opts); err != nil {
				err = pathError("mknod", name, err)
			}
		}
	case tar.TypeXHeader, tar.TypeXGlobalHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
		return nil // archive/tar applies these to the entries they describe
	default:
		return badArchive("tar entry %q has type %q, which has no file to make (regular files, directories, symlinks, hard links, devices and FIFOs can be copied in)", hdr.Name, hdr.Typeflag)
	}
	if err != nil {
		return err
	}
	x.stats.Entries++
	switch hdr.Typeflag {
	case tar.TypeLink:
		return nil // a hard link shares its target's owner, mode and times
	case tar.TypeSymlink:
		// A symlink's own mode means nothing to Linux; its time is kept,
		// as utimensat(AT_SYMLINK_NOFOLLOW) sets it.
		if err := x.setOwnerMode(name, hdr, false); err != nil {
			return err
		}
		return x.setTimes(name, hdr.ModTime)
	case tar.TypeDir:
		// Its time last: every entry made in it changes it.
		x.dirTimes = append(x.dirTimes, dirTime{name: name, mtime: hdr.ModTime})
		return x.setOwnerMode(name, hdr, true)
	}
	if err := x.setOwnerMode(name, hdr, true); err != nil {
		return err
	}
	return x.setTimes(name, hdr.ModTime)
}

// unlinkNonDir removes a non-directory at name, never following a
// symlink, and reports whether a directory is there instead.
func (x *extractor) unlinkNonDir(name string) (isDir bool, err error) {
	st, err := x.s.k.VFS().StatAt(x.ctx, x.creds, pathAt(x.root, name, false), &vfs.StatOptions{Mask: linux.STATX_TYPE})
	switch {
	case linuxerr.Equals(linuxerr.ENOENT, err):
		return false, nil
	case err != nil:
		return false, pathError("stat", name, err)
	case st.Mode&linux.S_IFMT == linux.S_IFDIR:
		return true, nil
	}
	if err := x.s.k.VFS().UnlinkAt(x.ctx, x.creds, pathAt(x.root, name, false)); err != nil {
		return false, pathError("unlink", name, err)
	}
	return false, nil
}

// replace makes way for a new file at name, as tar does: a symlink there
// is replaced, not followed, and a hard link's other names keep their
// content.
func (x *extractor) replace(name string) error {
	isDir, err := x.unlinkNonDir(name)
	if err == nil && isDir {
		return badArchive("copy in %s: a directory is in the way of a file of the archive; remove it first", name)
	}
	return err
}

// mkdir makes the directory name; an existing directory is kept.
func (x *extractor) mkdir(name string, mode uint16) error {
	isDir, err := x.unlinkNonDir(name)
	if err != nil {
		return err
	}
	if isDir {
		x.dirs[name] = true
		return nil
	}
	if err := x.s.k.VFS().MkdirAt(x.ctx, x.creds, pathAt(x.root, name, false), &vfs.MkdirOptions{Mode: linux.FileMode(mode)}); err != nil {
		return pathError("mkdir", name, err)
	}
	x.dirs[name] = true
	return nil
}

// mkdirAll makes the absolute directory name and its missing parents.
func (x *extractor) mkdirAll(name string) error {
	if x.dirs[name] {
		return nil
	}
	if err := mkdirAll(x.ctx, x.s.k.VFS(), x.parentCreds, x.root, name); err != nil {
		return err
	}
	x.dirs[name] = true
	return nil
}

// writeFile creates name with r's content; a sparse entry's blocks of
// zeros are left holes.
func (x *extractor) writeFile(name string, mode uint16, content io.Reader, sparse bool) error {
	if err := x.replace(name); err != nil {
		return err
	}
	fd, err := x.s.k.VFS().OpenAt(x.ctx, x.creds, pathAt(x.root, name, false), &vfs.OpenOptions{Flags: linux.O_WRONLY | linux.O_CREAT | linux.O_EXCL | linux.O_NOFOLLOW, Mode: linux.FileMode(mode)})
	if err != nil {
		return pathError("create", name, err)
	}
	defer fd.DecRef(x.ctx)
	if sparse {
		n, err := sparsetar.WriteHoles(fdFile{x.ctx, fd, name}, content, x.buf)
		x.stats.Bytes += n
		var readErr *sparsetar.ReadError
		if errors.As(err, &readErr) {
			return &archiveError{fmt.Errorf("reading the content of %s: %w", name, readErr.Err)}
		}
		return err
	}
	n, err := copyToFD(x.ctx, fd, name, content, x.buf)
	x.stats.Bytes += n
	var writeErr *fs.PathError
	if err != nil && !errors.As(err, &writeErr) {
		return &archiveError{err} // the archive ended or failed mid-file
	}
	return err
}

// fdFile is a guest file as sparsetar reads and writes it; its errors
// name the file.
type fdFile struct {
	ctx  gcontext.Context
	fd   *vfs.FileDescription
	name string
}

func (f fdFile) WriteAt(p []byte, off int64) (int, error) {
	var total int
	for len(p) > 0 {
		n, err := f.fd.PWrite(f.ctx, usermem.BytesIOSequence(p), off, vfs.WriteOptions{})
		total += int(n)
		if err != nil {
			return total, pathError("write", f.name, err)
		}
		p, off = p[n:], off+n
	}
	return total, nil
}

func (f fdFile) Truncate(size int64) error {
	if err := f.fd.SetStat(f.ctx, vfs.SetStatOptions{Stat: linux.Statx{Mask: linux.STATX_SIZE, Size: uint64(size)}}); err != nil {
		return pathError("truncate", f.name, err)
	}
	return nil
}

// ReadAt reads len(p) bytes at off, short only at the end of the file.
func (f fdFile) ReadAt(p []byte, off int64) (int, error) {
	var total int
	for len(p) > 0 {
		n, err := f.fd.PRead(f.ctx, usermem.BytesIOSequence(p), off, vfs.ReadOptions{})
		total += int(n)
		if err == io.EOF || (err == nil && n == 0) {
			return total, io.EOF
		}
		if err != nil {
			return total, pathError("read", f.name, err)
		}
		p, off = p[n:], off+n
	}
	return total, nil
}

// copyToFD writes r's content to fd through buf. A write error is an
// *fs.PathError; a read error is r's, wrapped.
func copyToFD(ctx gcontext.Context, fd *vfs.FileDescription, name string, r io.Reader, buf []byte) (int64, error) {
	var total int64
	for {
		n, rerr := r.Read(buf)
		for data := buf[:n]; len(data) > 0; {
			w, err := fd.Write(ctx, usermem.BytesIOSequence(data), vfs.WriteOptions{})
			total += w
			if err != nil {
				return total, pathError("write", name, err)
			}
			data = data[w:]
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, fmt.Errorf("reading the content of %s: %w", name, rerr)
		}
	}
}

func (x *extractor) setOwnerMode(name string, hdr *tar.Header, withMode bool) error {
	st := linux.Statx{Mask: linux.STATX_UID | linux.STATX_GID, UID: uint32(hdr.Uid), GID: uint32(hdr.Gid)}
	if x.owner != nil {
		st.UID, st.GID = x.owner.UID, x.owner.GID
	}
	if withMode {
		// chown clears set-user-ID and set-group-ID bits, so the mode
		// goes with it.
		st.Mask |= linux.STATX_MODE
		st.Mode = uint16(hdr.Mode & 0o7777)
	}
	if err := x.s.k.VFS().SetStatAt(x.ctx, x.creds, pathAt(x.root, name, false), &vfs.SetStatOptions{Stat: st}); err != nil {
		return pathError("chown", name, err)
	}
	return nil
}

func (x *extractor) setTimes(name string, mtime time.Time) error {
	if mtime.IsZero() {
		return nil
	}
	ts := linux.NsecToStatxTimestamp(mtime.UnixNano())
	st := linux.Statx{Mask: linux.STATX_ATIME | linux.STATX_MTIME, Atime: ts, Mtime: ts}
	if err := x.s.k.VFS().SetStatAt(x.ctx, x.creds, pathAt(x.root, name, false), &vfs.SetStatOptions{Stat: st}); err != nil {
		return pathError("utimes", name, err)
	}
	return nil
}

// CopyOut writes the file or directory tree at the absolute guest path
// name to w as a tar stream, as guest root. Entry names start with name's
// last element ("." for /), as `docker cp` and `tar -C PARENT NAME` name
// them. Symlinks are stored, not followed; a file with several names is
// stored once and linked; a file with blocks of zeros is stored as a
// sparse entry of its data; sockets are left out (tar cannot hold them).
func (s *Sandbox) CopyOut(ctx context.Context, name string, w io.Writer) (CopyStats, error) {
	if err := s.acquire(); err != nil {
		return CopyStats{}, err
	}
	defer s.release()
	kctx, root, err := s.fileRoot(name)
	if err != nil {
		return CopyStats{}, err
	}
	defer root.DecRef(kctx)
	name = path.Clean(name)
	top := path.Base(name)
	if name == "/" {
		top = "."
	}
	a := archiver{s: s, ctx: ctx, kctx: kctx, creds: s.rootCreds(), root: root, tw: sparsetar.NewWriter(w), links: map[fileID]string{}, buf: make([]byte, copyBufSize)}
	if err := a.add(name, top); err != nil {
		return a.stats, err
	}
	if err := a.tw.Close(); err != nil {
		return a.stats, err
	}
	return a.stats, nil
}

// archiver holds the state of one CopyOut.
type archiver struct {
	s     *Sandbox
	ctx   context.Context
	kctx  gcontext.Context
	creds *auth.Credentials
	root  vfs.VirtualDentry
	tw    *sparsetar.Writer
	links map[fileID]string
	stats CopyStats
	buf   []byte // for files' content
}

type fileID struct {
	devMajor, devMinor uint32
	ino                uint64
}

// add stores the file at the guest path name as the entry entry, and a
// directory's contents after it.
func (a *archiver) add(name, entry string) error {
	if err := a.ctx.Err(); err != nil {
		return err
	}
	st, err := a.s.k.VFS().StatAt(a.kctx, a.creds, pathAt(a.root, name, false), &vfs.StatOptions{Mask: linux.STATX_ALL})
	if err != nil {
		return pathError("stat", name, err)
	}
	hdr := &tar.Header{
		Name:    entry,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.UID),
		Gid:     int(st.GID),
		ModTime: time.Unix(st.Mtime.Sec, int64(st.Mtime.Nsec)),
		Format:  tar.FormatPAX,
	}
	id := fileID{st.DevMajor, st.DevMinor, st.Ino}
	switch st.Mode & linux.S_IFMT {
	case linux.S_IFDIR:
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		if err := a.write(hdr); err != nil {
			return err
		}
		names, err := a.list(name)
		if err != nil {
			return err
		}
		for _, child := range names {
			if err := a.add(path.Join(name, child), path.Join(entry, child)); err != nil {
				return err
			}
		}
		return nil
	case linux.S_IFREG:
		if first, ok := a.links[id]; ok && st.Nlink > 1 {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			return a.write(hdr)
		}
		if st.Nlink > 1 {
			a.links[id] = entry
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(st.Size)
		return a.file(name, hdr, int64(st.Blocks))
	case linux.S_IFLNK:
		target, err := a.s.k.VFS().ReadlinkAt(a.kctx, a.creds, pathAt(a.root, name, false))
		if err != nil {
			return pathError("readlink", name, err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return a.write(hdr)
	case linux.S_IFCHR, linux.S_IFBLK:
		hdr.Typeflag = tar.TypeChar
		if st.Mode&linux.S_IFMT == linux.S_IFBLK {
			hdr.Typeflag = tar.TypeBlock
		}
		hdr.Devmajor, hdr.Devminor = int64(st.RdevMajor), int64(st.RdevMinor)
		return a.write(hdr)
	case linux.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
		return a.write(hdr)
	}
	return nil // a socket
}

func (a *archiver) write(hdr *tar.Header) error {
	if err := a.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("writing the tar entry %s: %w", hdr.Name, err)
	}
	a.stats.Entries++
	return nil
}

// list returns the names in the directory at name, sorted, so that the
// same tree always gives the same archive.
func (a *archiver) list(name string) ([]string, error) {
	fd, err := a.s.k.VFS().OpenAt(a.kctx, a.creds, pathAt(a.root, name, false), &vfs.OpenOptions{Flags: linux.O_RDONLY | linux.O_DIRECTORY | linux.O_NOFOLLOW})
	if err != nil {
		return nil, pathError("open", name, err)
	}
	defer fd.DecRef(a.kctx)
	var names []string
	err = fd.IterDirents(a.kctx, vfs.IterDirentsCallbackFunc(func(d vfs.Dirent) error {
		if d.Name != "." && d.Name != ".." {
			names = append(names, d.Name)
		}
		return nil
	}))
	if err != nil {
		return nil, pathError("readdir", name, err)
	}
	sort.Strings(names)
	return names, nil
}

// scanFrom is the size from which a file is read for blocks of zeros
// before it is sent, whatever its blocks say: tmpfs, where most of the
// guest's files are, counts a hole's blocks as allocated and has no
// SEEK_HOLE.
const scanFrom = 1 << 20

// file stores the regular file at name, of header hdr and blocks (of 512
// bytes) allocated. A large file, or one whose blocks show holes, travels
// as a sparse entry if blocks of zeros are found in it.
func (a *archiver) file(name string, hdr *tar.Header, blocks int64) error {
	vfd, err := a.s.k.VFS().OpenAt(a.kctx, a.creds, pathAt(a.root, name, false), &vfs.OpenOptions{Flags: linux.O_RDONLY | linux.O_NOFOLLOW | linux.O_NONBLOCK})
	if err != nil {
		return pathError("open", name, err)
	}
	defer vfd.DecRef(a.kctx)
	f := fdFile{a.kctx, vfd, name}
	data := []sparsetar.Segment{{Off: 0, Len: hdr.Size}}
	if hdr.Size >= scanFrom || blocks*512 < hdr.Size {
		if data, err = sparsetar.Scan(f, hdr.Size, a.buf); errors.Is(err, io.EOF) {
			return shrank(name)
		} else if err != nil {
			return err
		}
	}
	if err := a.tw.WriteFileHeader(hdr, data); err != nil {
		return fmt.Errorf("writing the tar entry %s: %w", hdr.Name, err)
	}
	a.stats.Entries++
	for _, s := range data {
		if err := a.content(f, s); err != nil {
			return err
		}
	}
	a.stats.Bytes += hdr.Size
	return nil
}

// content copies the segment s of the file f into the archive.
func (a *archiver) content(f fdFile, s sparsetar.Segment) error {
	for off, end := s.Off, s.Off+s.Len; off < end; {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		n, err := f.ReadAt(a.buf[:min(end-off, int64(len(a.buf)))], off)
		if n > 0 {
			if _, werr := a.tw.Write(a.buf[:n]); werr != nil {
				return werr
			}
			off += int64(n)
		}
		if err == io.EOF && off < end {
			return shrank(f.name)
		}
		if err != nil && err != io.EOF {
			return err
		}
	}
	return nil
}

func shrank(name string) error {
	return &fs.PathError{Op: "copy out", Path: name, Err: errors.New("the file shrank while it was copied; copy it again when nothing writes to it")}
}

// pathError wraps a Sentry error for name with the host's errno type.
func pathError(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: name, Err: hostError(err)}
}
