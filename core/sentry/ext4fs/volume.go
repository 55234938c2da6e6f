package ext4fs

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/vfs"

	"z.gfire.dev/gvx/core/ext4lite"
)

// Volume is an open ext4lite filesystem the sandbox mounts. It is served
// by at most one gVisor filesystem at a time: mounting it again shares
// that filesystem, as mounting one block device twice shares its
// superblock on Linux. The Volume owns the ext4lite.FS.
type Volume struct {
	fs       *ext4lite.FS
	readOnly bool
	// restoreKey names the volume in snapshots; see CtxRestoreVolumes.
	restoreKey string

	// live is the filesystem serving the volume, or nil. It is set with
	// mu held but cleared without it: Release detaches a filesystem, and
	// a mount that fails half-way releases the one it made while it holds
	// mu.
	live atomic.Pointer[filesystem]

	mu     sync.Mutex
	closed bool
	err    error // Close's outcome
}

// NewVolume wraps fs, which the Volume owns from now on. readOnly must be
// true if fs was opened read-only; mount the volume read-only then.
// restoreKey names the volume in snapshots (the loader uses its mount
// point): a restored sandbox's filesystem is re-bound to the Volume given
// under the same key.
func NewVolume(fs *ext4lite.FS, readOnly bool, restoreKey string) *Volume {
	return &Volume{fs: fs, readOnly: readOnly, restoreKey: restoreKey}
}

// Mounted reports whether a filesystem serves the volume: it was mounted,
// or a restored snapshot's filesystem was bound to it.
func (v *Volume) Mounted() bool {
	return v.live.Load() != nil
}

// ReadOnly reports whether the volume was opened read-only.
func (v *Volume) ReadOnly() bool { return v.readOnly }

// mount returns the filesystem serving v, creating it if needed, with a
// reference on it and on its root.
func (v *Volume) mount(ctx context.Context, vfsObj *vfs.VirtualFilesystem, fstype FilesystemType, creds *auth.Credentials, mopts string) (*vfs.Filesystem, *vfs.Dentry, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil, nil, linuxerr.EIO
	}
	if fs := v.live.Load(); fs != nil && fs.vfsfs.TryIncRef() {
		fs.root.IncRef()
		return &fs.vfsfs, &fs.root.vfsd, nil
	}
	fs, err := newFilesystem(ctx, vfsObj, fstype, creds, v, mopts)
	if err != nil {
		return nil, nil, err
	}
	v.live.Store(fs)
	return &fs.vfsfs, &fs.root.vfsd, nil
}

// detach forgets fs, which is being released. It takes no lock: see
// Volume.live.
func (v *Volume) detach(fs *filesystem) {
	v.live.CompareAndSwap(fs, nil)
}

// Sync writes back the data of memory-mapped files and commits everything
// to the image.
func (v *Volume) Sync(ctx context.Context) error {
	v.mu.Lock()
	fs := v.live.Load()
	closed := v.closed
	v.mu.Unlock()
	if closed {
		return errors.New("ext4fs: the volume is closed")
	}
	if fs != nil {
		if err := fs.writebackAll(ctx); err != nil {
			return fmt.Errorf("ext4fs: writing back memory-mapped data: %w", err)
		}
	}
	if v.readOnly {
		return nil
	}
	return v.fs.Sync()
}

// Close writes back the data of memory-mapped files, lets go of files that
// were unlinked while open, and closes the ext4lite filesystem, which
// commits, checkpoints the journal and marks the image clean. Afterwards
// every operation on the volume's mounts fails with EIO. Close is
// idempotent and returns the first call's outcome.
//
// Preconditions: no guest task runs (the kernel was killed and waited for).
func (v *Volume) Close(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return v.err
	}
	v.closed = true
	var errs []error
	if fs := v.live.Load(); fs != nil {
		if err := fs.writebackAll(ctx); err != nil {
			errs = append(errs, fmt.Errorf("writing back memory-mapped data: %w", err))
		}
		fs.unpinAll()
	}
	if err := v.fs.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		v.err = fmt.Errorf("ext4fs: closing the volume (the image keeps its last committed state; check it with `rungv volume check`): %w", err)
	}
	return v.err
}
