package gvx

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/internal/atomicfile"
	"z.gfire.dev/gvx/core/internal/hosttar"
	"z.gfire.dev/gvx/core/internal/sparsetar"
)

// CopyOptions tune CopyIn and UploadDir.
type CopyOptions struct {
	// Owner, if set, owns every entry made, instead of the archive's
	// owners (CopyIn) or root (UploadDir), and the missing directories
	// made on the way, instead of root: "uid[:gid]" or "name[:group]",
	// resolved as ExecOptions.User is.
	Owner string
}

// CopyIn extracts the tar stream r into the guest directory dir, which is
// created with its parents if missing, as `docker cp - CONTAINER:DIR`
// does. Entries keep the archive's modes, owners and times. The sandbox
// extracts it itself: the image needs no tar.
func (sb *Sandbox) CopyIn(ctx context.Context, dir string, r io.Reader, opts CopyOptions) (CopyResult, error) {
	res, err := sb.client.CopyIn(ctx, control.CopyInRequest{Path: dir, Owner: opts.Owner}, r)
	return res, sb.callError(err)
}

// CopyOut writes the file or directory tree at the guest path to w as a
// tar stream whose names start with the path's last element, as
// `docker cp CONTAINER:PATH -` does. w is written from the connection's
// reader, so a slow w delays the sandbox's other answers: give a buffer or
// a file.
func (sb *Sandbox) CopyOut(ctx context.Context, path string, w io.Writer) (CopyResult, error) {
	res, err := sb.client.CopyOut(ctx, path, w)
	return res, sb.callError(err)
}

// UploadDir copies the contents of the host directory hostDir into the
// guest directory guestDir (created if missing), like `rsync -a
// hostDir/ guestDir/` without deletions. Files belong to root in the guest
// (or opts.Owner) and keep their permission bits (set-user-ID and
// set-group-ID too) and modification times; symlinks are copied as
// symlinks with their times; hard links within hostDir stay hard links,
// and a file's holes stay holes without being sent. A device, FIFO or
// socket in hostDir is refused before anything is copied.
func (sb *Sandbox) UploadDir(ctx context.Context, hostDir, guestDir string, opts CopyOptions) (CopyResult, error) {
	st, err := os.Stat(hostDir)
	if err != nil {
		return CopyResult{}, fmt.Errorf("gvx: upload: %w", err)
	}
	if !st.IsDir() {
		return CopyResult{}, control.Errorf(control.CodeInvalid, "gvx: upload: %s is not a directory; copy a file with WriteFile or Upload", hostDir)
	}
	// A tree that cannot be sent is refused before anything reaches the
	// sandbox; only a file that changes or fails to read while it is
	// sent can leave the copy partial.
	if err := checkUploadable(hostDir); err != nil {
		return CopyResult{}, err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarHostDir(hostDir, pw)) }()
	res, err := sb.CopyIn(ctx, guestDir, pr, opts)
	// Stops the archiver if the sandbox gave up first.
	pr.CloseWithError(errors.New("the sandbox stopped reading"))
	return res, err
}

// UploadOptions tune Upload.
type UploadOptions struct {
	// Mode, if set, is the mode of a file uploaded instead of the host
	// file's permission bits: 0 to 07777, of which only the permission
	// bits (0777) are applied, as for the host file's, and 0 is 0644. A
	// directory's files keep their own, and a Mode for one is refused.
	Mode *fs.FileMode
	// Owner is who what is copied belongs to in the sandbox instead of
	// root, and the directories made on the way: "uid[:gid]" or
	// "name[:group]", resolved as ExecOptions.User is.
	Owner string
}

// Upload copies the host file or directory hostPath into the sandbox: a
// regular file to the file guestPath, as WriteFile writes it (whole or
// not at all) with the host file's permission bits unless opts.Mode says
// otherwise; a directory's contents into the directory guestPath, as
// UploadDir copies them. A host file that cannot be read, or is not a
// regular file or a directory, is an invalid argument, and nothing is
// written.
func (sb *Sandbox) Upload(ctx context.Context, hostPath, guestPath string, opts UploadOptions) error {
	if opts.Mode != nil && *opts.Mode&^0o7777 != 0 {
		return control.Errorf(control.CodeInvalid, "mode %#o has bits beyond the permission bits (07777); leave it unset to keep the host file's", uint32(*opts.Mode))
	}
	if st, err := os.Stat(hostPath); err == nil && st.IsDir() {
		if opts.Mode != nil {
			return control.Errorf(control.CodeInvalid, "mode %#o is for a file, and %s is a directory, whose files keep their own: leave it unset", uint32(*opts.Mode), hostPath)
		}
		_, err := sb.UploadDir(ctx, hostPath, guestPath, CopyOptions{Owner: opts.Owner})
		return err
	}
	f, err := os.Open(hostPath)
	if err != nil {
		return control.Errorf(control.CodeInvalid, "host file %s: %v", hostPath, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("gvx: upload: %w", err)
	}
	if !st.Mode().IsRegular() {
		return control.Errorf(control.CodeInvalid, "host file %s is not a regular file", hostPath)
	}
	perm := st.Mode().Perm()
	if opts.Mode != nil {
		perm = opts.Mode.Perm()
	}
	_, err = sb.WriteFile(ctx, guestPath, f, WriteOptions{Mode: perm, Owner: opts.Owner})
	if se := (*control.SourceError)(nil); errors.As(err, &se) {
		return control.Errorf(control.CodeInvalid, "host file %s could not be read, so nothing was written: %v", hostPath, se.Err)
	}
	return err
}

// checkUploadable walks hostDir for entries tarHostDir would refuse.
func checkUploadable(hostDir string) error {
	return uploadError(hosttar.Check(hostDir))
}

// tarHostDir writes hostDir's tree to w (see package hosttar).
func tarHostDir(hostDir string, w io.Writer) error {
	return uploadError(hosttar.Write(hostDir, w))
}

// uploadError is err, of package hosttar, as an upload's: an entry that
// cannot be sent is an invalid argument.
func uploadError(err error) error {
	if err == nil {
		return nil
	}
	if ue := (*hosttar.UnsupportedError)(nil); errors.As(err, &ue) {
		err = control.Errorf(control.CodeInvalid, "%s is a %v, not a regular file, directory or symlink; leave it out of the directory you upload", ue.Path, ue.Type)
	}
	return fmt.Errorf("gvx: upload: %w", err)
}

// DownloadDir copies the contents of the guest directory guestDir into the
// host directory hostDir (created if missing). Everything lands inside
// hostDir, whatever the guest's names and symlinks say: the guest is not
// trusted: a hard link may reach only a file of the same download. Files
// belong to the caller and keep their permission bits without set-user-ID
// and set-group-ID, and their modification times; symlinks stay symlinks
// with their times; hard links stay hard links and holes stay holes;
// devices and FIFOs are left out.
func (sb *Sandbox) DownloadDir(ctx context.Context, guestDir, hostDir string) (CopyResult, error) {
	if info, err := sb.Stat(ctx, guestDir); err != nil {
		return CopyResult{}, err
	} else if !info.IsDir() {
		return CopyResult{}, control.Errorf(control.CodeInvalid, "gvx: download: %s in the sandbox is not a directory; copy a file with DownloadFile", guestDir)
	}
	return sb.downloadDir(ctx, guestDir, hostDir)
}

// Download copies the file or directory at the guest path to hostPath:
// DownloadFile for a file, DownloadDir for a directory.
func (sb *Sandbox) Download(ctx context.Context, guestPath, hostPath string) error {
	info, err := sb.Stat(ctx, guestPath)
	if err != nil {
		return err
	}
	if info.IsDir() {
		_, err = sb.downloadDir(ctx, guestPath, hostPath)
		return err
	}
	return sb.DownloadFile(ctx, guestPath, hostPath)
}

// downloadDir is DownloadDir once guestDir is known to be a directory.
func (sb *Sandbox) downloadDir(ctx context.Context, guestDir, hostDir string) (CopyResult, error) {
	// The archive is spooled to a file, not extracted while it arrives:
	// extracting would hold up the connection's other answers.
	spool, err := os.CreateTemp("", "gvx-download-*.tar")
	if err != nil {
		return CopyResult{}, fmt.Errorf("gvx: download: %w", err)
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	res, err := sb.CopyOut(ctx, guestDir, spool)
	if err != nil {
		return res, err
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return res, err
	}
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return res, fmt.Errorf("gvx: download: %w", err)
	}
	if err := extractHostTar(spool, hostDir); err != nil {
		return res, fmt.Errorf("gvx: download into %s: %w", hostDir, err)
	}
	return res, nil
}

// DownloadFile copies the regular file at the guest path to the host file
// hostPath, streaming it. The file appears whole or not at all (it is
// written beside hostPath and renamed over it), with the guest file's
// permission bits less set-user-ID and set-group-ID.
func (sb *Sandbox) DownloadFile(ctx context.Context, guestPath, hostPath string) error {
	var callErr error
	err := atomicfile.Write(hostPath, func(f *os.File) error {
		info, err := sb.client.ReadFile(ctx, guestPath, f)
		if err != nil {
			callErr = sb.callError(err)
			return callErr
		}
		return f.Chmod(fs.FileMode(info.Mode & 0o1777))
	})
	if err != nil && err != callErr {
		return fmt.Errorf("gvx: download: writing %s: %w", hostPath, err)
	}
	return err
}

// extractHostTar extracts a CopyOut archive into dir, dropping the first
// element of each name (the guest directory's own name). os.Root keeps
// every operation inside dir, also through symlinks the archive made.
func extractHostTar(r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	x := &hostExtractor{top: root, known: map[string]bool{".": true}, files: map[string]bool{}}
	defer x.close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if err := x.extract(hdr, tr); err != nil {
			return err
		}
	}
	return x.finish()
}

// hostExtractor holds the state of one extractHostTar. Operations go
// through an os.Root of the entry's directory, so each resolves one name
// instead of the whole path (CopyOut sends a directory's entries
// together): 3,534 entries took 3.9 s through the top root alone.
type hostExtractor struct {
	top *os.Root
	// cur is the os.Root of directory curName, if not top.
	cur     *os.Root
	curName string
	// known are the directories made or seen.
	known map[string]bool
	// files are the regular files made: the only targets a hard link may
	// have, so that none reaches a file the archive did not bring.
	files map[string]bool
	buf   []byte // for sparse files' content
	// dirs get their modes and times last: a read-only one must still
	// take its files, and each file changes its time.
	dirs []hostDir
}

type hostDir struct {
	name  string
	perm  fs.FileMode
	mtime time.Time
}

func (x *hostExtractor) close() {
	if x.cur != nil {
		x.cur.Close()
	}
	x.top.Close()
}

// in returns the os.Root of the directory dir.
func (x *hostExtractor) in(dir string) (*os.Root, error) {
	if dir == "." {
		return x.top, nil
	}
	if x.cur != nil && x.curName == dir {
		return x.cur, nil
	}
	if !x.known[dir] {
		if err := x.top.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		x.known[dir] = true
	}
	r, err := x.top.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	if x.cur != nil {
		x.cur.Close()
	}
	x.cur, x.curName = r, dir
	return r, nil
}

// underTop returns an archive name without its first element (the guest
// directory's own name), relative to the download's top: "." for the top.
func underTop(name string) (string, error) {
	_, rest, _ := strings.Cut(name, "/")
	rel := path.Clean("./" + rest)
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("archive name %q leaves the directory", name)
	}
	return rel, nil
}

func (x *hostExtractor) extract(hdr *tar.Header, content io.Reader) error {
	name, err := underTop(hdr.Name)
	if err != nil {
		return err
	}
	perm := fs.FileMode(hdr.Mode) & fs.ModePerm
	if hdr.Mode&0o1000 != 0 {
		perm |= fs.ModeSticky
	}
	if hdr.Typeflag == tar.TypeDir {
		if name != "." {
			parent, err := x.in(path.Dir(name))
			if err != nil {
				return err
			}
			base := path.Base(name)
			if st, err := parent.Lstat(base); err == nil && !st.IsDir() {
				if err := parent.Remove(base); err != nil {
					return err
				}
			}
			if err := parent.Mkdir(base, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			x.known[name] = true
		}
		x.dirs = append(x.dirs, hostDir{name, perm, hdr.ModTime})
		return nil
	}
	if name == "." {
		return fmt.Errorf("archive entry %q is not a directory but stands for the download's top", hdr.Name)
	}
	parent, err := x.in(path.Dir(name))
	if err != nil {
		return err
	}
	base := path.Base(name)
	switch hdr.Typeflag {
	case tar.TypeReg:
		if err := removeNonDir(parent, base); err != nil {
			return err
		}
		f, err := parent.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if sparsetar.IsSparse(hdr) {
			if x.buf == nil {
				x.buf = make([]byte, 256<<10)
			}
			_, err = sparsetar.WriteHoles(f, content, x.buf)
		} else {
			_, err = io.Copy(f, content)
		}
		if err == nil {
			err = f.Chmod(perm)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		x.files[name] = true
		return parent.Chtimes(base, hdr.ModTime, hdr.ModTime)
	case tar.TypeLink:
		if err := removeNonDir(parent, base); err != nil {
			return err
		}
		target, err := underTop(hdr.Linkname)
		if err != nil {
			return err
		}
		if !x.files[target] {
			return fmt.Errorf("archive entry %q is a hard link to %q, which is not a file the archive brought before it", hdr.Name, hdr.Linkname)
		}
		if err := x.top.Link(target, name); err != nil {
			return err
		}
		x.files[name] = true
		return nil
	case tar.TypeSymlink:
		if err := removeNonDir(parent, base); err != nil {
			return err
		}
		delete(x.files, name)
		if err := parent.Symlink(hdr.Linkname, base); err != nil {
			return err
		}
		return lchtimes(parent, base, hdr.ModTime)
	}
	return nil // devices and FIFOs are left out
}

// finish gives the directories their modes and times, deepest first.
func (x *hostExtractor) finish() error {
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := x.top.Chmod(d.name, d.perm); err != nil {
			return err
		}
		if err := x.top.Chtimes(d.name, d.mtime, d.mtime); err != nil {
			return err
		}
	}
	return nil
}

// lchtimes gives the symlink name in dir the modification time mtime,
// without following it.
func lchtimes(dir *os.Root, name string, mtime time.Time) error {
	d, err := dir.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	ts := unix.NsecToTimespec(mtime.UnixNano())
	if err := unix.UtimesNanoAt(int(d.Fd()), name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "lutimes", Path: name, Err: err}
	}
	return nil
}

// removeNonDir makes way for a new file at name: a file or symlink there
// is removed (never followed), a directory is an error.
func removeNonDir(root *os.Root, name string) error {
	st, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("%s: a directory is in the way of a file from the sandbox", name)
	}
	return root.Remove(name)
}
