package ext4fs

import (
	"container/list"
	"fmt"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/pgalloc"
	"gvisor.dev/gvisor/pkg/sentry/socket/unix/transport"
	"gvisor.dev/gvisor/pkg/sentry/vfs"

	"z.gfire.dev/gvx/core/ext4lite"
)

// Name is the filesystem type's name, as /proc/mounts and statfs show it.
const Name = "ext4"

// superMagic is EXT4_SUPER_MAGIC, statfs(2)'s f_type for ext2/3/4.
const superMagic = 0xEF53

// maxCachedDentries bounds the unreferenced dentries kept for lookups.
const maxCachedDentries = 16384

// FilesystemType implements vfs.FilesystemType.
//
// +stateify savable
type FilesystemType struct{}

var _ vfs.FilesystemType = (*FilesystemType)(nil)

// InternalData is the vfs.GetFilesystemOptions.InternalData the loader
// passes to mount a Volume.
type InternalData struct {
	Volume *Volume
}

// Name implements vfs.FilesystemType.Name.
func (FilesystemType) Name() string { return Name }

// Release implements vfs.FilesystemType.Release.
func (FilesystemType) Release(ctx context.Context) {}

// GetFilesystem implements vfs.FilesystemType.GetFilesystem.
func (fstype FilesystemType) GetFilesystem(ctx context.Context, vfsObj *vfs.VirtualFilesystem, creds *auth.Credentials, source string, opts vfs.GetFilesystemOptions) (*vfs.Filesystem, *vfs.Dentry, error) {
	data, ok := opts.InternalData.(InternalData)
	if !ok || data.Volume == nil {
		ctx.Infof("ext4fs: %s filesystems are mounted by the loader (rungv --mount type=volume); there is no device to mount %q from", Name, source)
		return nil, nil, linuxerr.ENODEV
	}
	return data.Volume.mount(ctx, vfsObj, fstype, creds, opts.Data)
}

// filesystem implements vfs.FilesystemImpl.
//
// In a snapshot, the filesystem keeps its dentries and inodes and the
// pages it caches, but not the image: CompleteRestore re-binds it to the
// Volume the restoring loader opened under the same key (see
// save_restore.go).
//
// +stateify savable
type filesystem struct {
	vfsfs vfs.Filesystem

	// volKey names the volume in a snapshot.
	volKey    string
	vol       *Volume             `state:"nosave"`
	fs        *ext4lite.FS        `state:"nosave"`
	mf        *pgalloc.MemoryFile `state:"nosave"`
	devMinor  uint32
	blockSize int64
	mopts     string
	// rootNS is the root user namespace: ACLs on disk hold kernel IDs.
	rootNS *auth.UserNamespace

	// root is the root dentry; the filesystem holds a reference on it.
	root *dentry

	// mu protects the shape of the dentry tree (see the package
	// documentation).
	mu sync.RWMutex `state:"nosave"`

	// ancestryMu additionally protects dentry.parent and dentry.name, so
	// that PrependPath and IsDescendant need not take mu.
	ancestryMu sync.RWMutex `state:"nosave"`

	inodesMu sync.Mutex `state:"nosave"`
	inodes   map[ext4lite.Ino]*inode

	// cacheMu protects lru and dentry.lruElem. A restored filesystem
	// starts with an empty LRU: its unused dentries stay cached and
	// rejoin the LRU when next used and released.
	cacheMu sync.Mutex   `state:"nosave"`
	lru     list.List    `state:"nosave"`
	lruLen  atomic.Int64 `state:"nosave"`

	// endpointsMu protects endpoints: the unix sockets bound to socket
	// files, by inode. They live in memory only, as on Linux.
	endpointsMu sync.Mutex `state:"nosave"`
	endpoints   map[ext4lite.Ino]transport.BoundEndpoint

	released atomic.Bool `state:"nosave"`
}

var _ vfs.FilesystemImpl = (*filesystem)(nil)

// newFilesystem creates the gVisor filesystem serving v.
//
// Preconditions: v.mu is held; v has no live filesystem.
func newFilesystem(ctx context.Context, vfsObj *vfs.VirtualFilesystem, fstype FilesystemType, creds *auth.Credentials, v *Volume, mopts string) (*filesystem, error) {
	mf := pgalloc.MemoryFileFromContext(ctx)
	if mf == nil {
		ctx.Warningf("ext4fs: no memory file in the mount context")
		return nil, linuxerr.EINVAL
	}
	devMinor, err := vfsObj.GetAnonBlockDevMinor()
	if err != nil {
		return nil, err
	}
	fs := &filesystem{
		volKey:    v.restoreKey,
		vol:       v,
		fs:        v.fs,
		mf:        mf,
		devMinor:  devMinor,
		blockSize: int64(v.fs.BlockSize()),
		mopts:     mopts,
		rootNS:    creds.UserNamespace.Root(),
		inodes:    make(map[ext4lite.Ino]*inode),
		endpoints: make(map[ext4lite.Ino]transport.BoundEndpoint),
	}
	fs.vfsfs.Init(vfsObj, &fstype, fs)
	// Only the loader mounts a Volume (see GetFilesystem), so these errors
	// reach it, not a guest system call, and may say more than EIO.
	rootInode, err := fs.getInode(ext4lite.RootIno)
	if err != nil {
		fs.vfsfs.DecRef(ctx)
		return nil, fmt.Errorf("ext4fs: reading the root directory (inode %d): %w", ext4lite.RootIno, err)
	}
	if rootInode.ftype != linux.S_IFDIR {
		mode := rootInode.mode.Load()
		rootInode.decRef(ctx)
		fs.vfsfs.DecRef(ctx)
		return nil, fmt.Errorf("ext4fs: the root inode (%d) is not a directory (mode %#o): the filesystem is damaged: %w", ext4lite.RootIno, mode, linuxerr.EIO)
	}
	// One reference for the filesystem, one for the caller.
	fs.root = fs.newDentry(nil, "", rootInode)
	fs.root.refs.Store(2)
	return fs, nil
}

// Release implements vfs.FilesystemImpl.Release.
func (fs *filesystem) Release(ctx context.Context) {
	fs.released.Store(true)
	// No file of this filesystem is open or mapped any more, so the page
	// cache is empty; write back anything left anyway.
	if err := fs.writebackAll(ctx); err != nil {
		ctx.Warningf("ext4fs: writing back cached data at unmount: %v", err)
	}
	fs.mu.Lock()
	fs.evictLocked(ctx, 0)
	fs.mu.Unlock()
	if fs.root != nil {
		fs.root.DecRef(ctx)
	}
	fs.vol.detach(fs)
	fs.vfsfs.VirtualFilesystem().PutAnonBlockDevMinor(fs.devMinor)
}

// Sync implements vfs.FilesystemImpl.Sync.
func (fs *filesystem) Sync(ctx context.Context) error {
	if err := fs.writebackAll(ctx); err != nil {
		return err
	}
	if fs.vol.readOnly {
		return nil
	}
	return errno(fs.fs.Sync())
}

// MountOptions implements vfs.FilesystemImpl.MountOptions.
func (fs *filesystem) MountOptions() string { return fs.mopts }

// statFS returns the filesystem's capacity figures.
func (fs *filesystem) statFS() (linux.Statfs, error) {
	sf, err := fs.fs.Statfs()
	if err != nil {
		return linux.Statfs{}, errno(err)
	}
	return linux.Statfs{
		Type:            superMagic,
		BlockSize:       sf.BlockSize,
		Blocks:          sf.Blocks,
		BlocksFree:      sf.BlocksFree,
		BlocksAvailable: sf.BlocksAvail,
		Files:           sf.Files,
		FilesFree:       sf.FilesFree,
		FSID:            [2]int32{int32(sf.FSID[0]), int32(sf.FSID[1])},
		NameLength:      sf.NameLen,
		FragmentSize:    sf.BlockSize,
	}, nil
}
