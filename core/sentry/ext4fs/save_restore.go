package ext4fs

import (
	stdcontext "context"
	"fmt"
	iofs "io/fs"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/sentry/pgalloc"
	"gvisor.dev/gvisor/pkg/sentry/vfs"

	"z.gfire.dev/gvx/core/ext4lite"
)

// A snapshot of a sandbox holds each ext4 filesystem's dentries, inodes,
// open files and the pages it caches in the memory file, but not the
// image: the image on the host is the other half of the snapshot. Saving
// writes every cached page back and commits, so the image then holds
// exactly what the snapshot's inodes refer to; the loader must keep it so
// (stop the sandbox, or clone the image before the guest runs on).
// Restoring re-binds each filesystem to the Volume the loader opened
// under the same key (CtxRestoreVolumes), usually a clone of that image.

// contextID is this package's context key type.
type contextID int

// CtxRestoreVolumes is the key of the map[string]*Volume, by restore key,
// that a restore's context carries.
const CtxRestoreVolumes contextID = iota

var _ vfs.FilesystemImplSaveRestoreExtension = (*filesystem)(nil)

// PrepareSave implements vfs.FilesystemImplSaveRestoreExtension.PrepareSave.
// It writes back the data of memory-mapped files and commits the image.
// A file deleted while still open cannot be saved: its blocks live only
// as long as this process holds it, and the image a restore opens would
// have freed them.
func (fs *filesystem) PrepareSave(ctx context.Context) error {
	if err := fs.writebackAll(ctx); err != nil {
		return fmt.Errorf("ext4fs: writing back memory-mapped data of volume %q: %w", fs.volKey, err)
	}
	fs.inodesMu.Lock()
	var pinned []*inode
	for _, i := range fs.inodes {
		if i.pinned {
			pinned = append(pinned, i)
		}
	}
	fs.inodesMu.Unlock()
	for _, i := range pinned {
		st, err := fs.fs.Stat(i.ino)
		if err != nil {
			return fmt.Errorf("ext4fs: volume %q, inode %d: %w", fs.volKey, i.ino, err)
		}
		if st.Nlink == 0 {
			return fmt.Errorf("ext4fs: volume %q has a file that was deleted while a guest process still has it open (inode %d); a snapshot cannot hold it, so close it first: %w", fs.volKey, i.ino, iofs.ErrInvalid)
		}
	}
	if fs.vol.readOnly {
		return nil
	}
	if err := fs.fs.Sync(); err != nil {
		return fmt.Errorf("ext4fs: committing volume %q: %w", fs.volKey, err)
	}
	return nil
}

// BeforeResume implements
// vfs.FilesystemImplSaveRestoreExtension.BeforeResume.
func (fs *filesystem) BeforeResume(ctx context.Context) {}

// CompleteRestore implements
// vfs.FilesystemImplSaveRestoreExtension.CompleteRestore. It binds the
// restored filesystem to its Volume and checks that the volume's image
// has the inodes the snapshot refers to, with the same types.
func (fs *filesystem) CompleteRestore(ctx context.Context, opts vfs.CompleteRestoreOptions) error {
	vols, _ := ctx.Value(CtxRestoreVolumes).(map[string]*Volume)
	v := vols[fs.volKey]
	if v == nil {
		return fmt.Errorf("ext4fs: the snapshot has a volume at %q; restore it with that volume (a clone of the image saved with the snapshot)", fs.volKey)
	}
	mf := pgalloc.MemoryFileFromContext(ctx)
	if mf == nil {
		return fmt.Errorf("ext4fs: no memory file in the restore context")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.live.Load() != nil || v.closed {
		return fmt.Errorf("ext4fs: the volume for %q is already in use", fs.volKey)
	}
	fs.vol = v
	fs.fs = v.fs
	fs.mf = mf
	fs.inodesMu.Lock()
	defer fs.inodesMu.Unlock()
	for _, i := range fs.inodes {
		st, err := fs.fs.Stat(i.ino)
		if err != nil {
			return fmt.Errorf("ext4fs: the volume for %q lacks inode %d of the snapshot (is it the image saved with the snapshot?): %w", fs.volKey, i.ino, err)
		}
		if st.Mode&linux.S_IFMT != i.ftype {
			return fmt.Errorf("ext4fs: inode %d of the volume for %q has type %#o, the snapshot's has %#o; restore with the image saved with the snapshot", i.ino, fs.volKey, st.Mode&linux.S_IFMT, i.ftype)
		}
		if i.pinned {
			if err := fs.fs.IncRef(i.ino); err != nil {
				return fmt.Errorf("ext4fs: volume %q, inode %d: %w", fs.volKey, i.ino, err)
			}
		}
	}
	v.live.Store(fs)
	return nil
}

// saveRdev is called by the generated StateSave: ext4lite.Dev is not a
// savable type.
func (i *inode) saveRdev() uint64 { return uint64(i.rdev.Major)<<32 | uint64(i.rdev.Minor) }

// loadRdev is called by the generated StateLoad.
func (i *inode) loadRdev(_ stdcontext.Context, v uint64) {
	i.rdev = ext4lite.Dev{Major: uint32(v >> 32), Minor: uint32(v)}
}
