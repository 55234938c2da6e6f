package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/sentry"
)

// ReadFile implements control.Backend.ReadFile.
func (b *Backend) ReadFile(ctx context.Context, path string, w io.Writer) (control.FileInfo, error) {
	f, err := b.sb.Open(ctx, path)
	if err != nil {
		return control.FileInfo{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return control.FileInfo{}, err
	}
	if _, err := io.Copy(w, f); err != nil {
		return control.FileInfo{}, fmt.Errorf("reading %s: %w", path, err)
	}
	return fileInfo(path, fi), nil
}

// WriteFile implements control.Backend.WriteFile.
func (b *Backend) WriteFile(ctx context.Context, req control.WriteFileRequest, r io.Reader) (control.FileInfo, error) {
	mode := fs.FileMode(req.Mode & 0o7777)
	if mode == 0 {
		mode = 0o644
	}
	owner, err := b.owner(ctx, req.Owner)
	if err != nil {
		return control.FileInfo{}, err
	}
	if req.MakeParents {
		if err := b.sb.MkdirAll(ctx, path.Dir(req.Path), owner); err != nil {
			return control.FileInfo{}, err
		}
	}
	if _, err := b.sb.WriteFileFrom(ctx, req.Path, r, mode, owner); err != nil {
		return control.FileInfo{}, err
	}
	return b.Stat(ctx, req.Path)
}

// owner resolves a request's owner as Exec resolves its user. "" is nil:
// root, or an archive's owners.
func (b *Backend) owner(ctx context.Context, spec string) (*sentry.Owner, error) {
	if spec == "" {
		return nil, nil
	}
	u, err := ResolveUser(ctx, b.sb, spec)
	if err != nil {
		return nil, control.Errorf(control.CodeInvalid, "owner: %v", err)
	}
	return &sentry.Owner{UID: u.UID, GID: u.GID}, nil
}

// CopyIn implements control.Backend.CopyIn.
func (b *Backend) CopyIn(ctx context.Context, req control.CopyInRequest, r io.Reader) (control.CopyResult, error) {
	owner, err := b.owner(ctx, req.Owner)
	if err != nil {
		return control.CopyResult{}, err
	}
	dir := req.Path
	st, err := b.sb.CopyIn(ctx, dir, r, owner)
	if errors.Is(err, sentry.ErrBadArchive) {
		return control.CopyResult{}, control.Errorf(control.CodeInvalid, "copying into %s (after %d entries): %v", dir, st.Entries, err)
	}
	if err != nil {
		return control.CopyResult{}, fmt.Errorf("copying into %s (after %d entries): %w", dir, st.Entries, err)
	}
	return control.CopyResult{Entries: st.Entries, Bytes: st.Bytes}, nil
}

// CopyOut implements control.Backend.CopyOut.
func (b *Backend) CopyOut(ctx context.Context, path string, w io.Writer) (control.CopyResult, error) {
	st, err := b.sb.CopyOut(ctx, path, w)
	if err != nil {
		return control.CopyResult{}, fmt.Errorf("copying %s out: %w", path, err)
	}
	return control.CopyResult{Entries: st.Entries, Bytes: st.Bytes}, nil
}

// Stat implements control.Backend.Stat.
func (b *Backend) Stat(ctx context.Context, path string) (control.FileInfo, error) {
	fi, err := b.sb.Stat(ctx, path)
	if err != nil {
		return control.FileInfo{}, err
	}
	return fileInfo(path, fi), nil
}

// fileInfo is fi, of the guest file at path, as the protocol answers it.
func fileInfo(path string, fi fs.FileInfo) control.FileInfo {
	info := control.FileInfo{Path: path, Size: fi.Size(), Mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*sentry.FileStat); ok {
		info.Mode, info.UID, info.GID = st.Mode, st.UID, st.GID
	}
	return info
}
