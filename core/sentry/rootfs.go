package sentry

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/cleanup"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/erofs"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/overlay"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/tmpfs"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
)

// newRootMountNamespace builds the guest's root filesystem: the EROFS image
// read-only under an in-memory tmpfs, joined by overlay, and returns a mount
// namespace with it at "/". The caller owns the returned reference.
//
// imageFD is a host descriptor of the image; it is consumed whatever the
// outcome.
//
// A nonzero sizeLimit caps the writable layer, so writing files cannot use
// more than the sandbox's memory.
func newRootMountNamespace(ctx context.Context, k *kernel.Kernel, creds *auth.Credentials, imageFD int, sizeLimit uint64) (*vfs.MountNamespace, error) {
	vfsObj := k.VFS()

	lower, err := mountImage(ctx, vfsObj, creds, imageFD)
	if err != nil {
		return nil, err
	}
	defer lower.DecRef(ctx)
	lowerRoot := vfs.MakeVirtualDentry(lower, lower.Root())

	upper, err := mountUpper(ctx, vfsObj, creds, lowerRoot, sizeLimit)
	if err != nil {
		return nil, err
	}
	defer upper.DecRef(ctx)

	root, err := vfsObj.MountDisconnected(ctx, creds, "rootfs", overlay.Name, &vfs.MountOptions{
		GetFilesystemOptions: vfs.GetFilesystemOptions{
			InternalMount: true,
			InternalData: overlay.FilesystemOptions{
				UpperRoot:  vfs.MakeVirtualDentry(upper, upper.Root()),
				LowerRoots: []vfs.VirtualDentry{lowerRoot},
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("sentry: joining the image and the memory layer with overlay: %w", err)
	}
	defer root.DecRef(ctx)

	// As runsc does, the namespace's own root is an empty read-only tmpfs
	// that the overlay is mounted over: the namespace root mount can never
	// be unmounted or replaced, and this keeps pivot_root inside working.
	mns, err := vfsObj.NewMountNamespace(ctx, creds, "none", tmpfs.Name, &vfs.MountOptions{ReadOnly: true, Locked: true}, k)
	if err != nil {
		return nil, fmt.Errorf("sentry: creating the mount namespace: %w", err)
	}
	cu := cleanup.Make(func() { mns.DecRef(ctx) })
	defer cu.Clean()
	nsRoot := mns.Root(ctx)
	defer nsRoot.DecRef(ctx)
	if err := vfsObj.ConnectMountAt(ctx, creds, root, &vfs.PathOperation{Root: nsRoot, Start: nsRoot}); err != nil {
		return nil, fmt.Errorf("sentry: mounting the root filesystem: %w", err)
	}
	cu.Release()
	return mns, nil
}

// mountImage mounts the EROFS image read-only, unattached. It consumes fd:
// erofs owns it from the moment it parses the options we format, and closes
// it on its own failure paths.
func mountImage(ctx context.Context, vfsObj *vfs.VirtualFilesystem, creds *auth.Credentials, fd int) (*vfs.Mount, error) {
	mnt, err := vfsObj.MountDisconnected(ctx, creds, "image", erofs.Name, &vfs.MountOptions{
		ReadOnly: true,
		GetFilesystemOptions: vfs.GetFilesystemOptions{
			InternalMount: true,
			Data:          fmt.Sprintf("ifd=%d", fd),
			// The name a snapshot gives the image, so Restore can hand
			// the restored filesystem a new descriptor of it.
			InternalData: erofs.InternalFilesystemOptions{UniqueID: imageResourceID},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("sentry: mounting the EROFS image (is it uncompressed, with 4 KiB blocks, no inline data and no xattrs?): %w", err)
	}
	return mnt, nil
}

// mountUpper creates the writable in-memory layer. Its root takes the
// owner and mode of lowerRoot so "/" looks like the image's.
func mountUpper(ctx context.Context, vfsObj *vfs.VirtualFilesystem, creds *auth.Credentials, lowerRoot vfs.VirtualDentry, sizeLimit uint64) (*vfs.Mount, error) {
	st, err := vfsObj.StatAt(ctx, creds, &vfs.PathOperation{Root: lowerRoot, Start: lowerRoot}, &vfs.StatOptions{
		Mask: linux.STATX_UID | linux.STATX_GID | linux.STATX_MODE | linux.STATX_TYPE,
	})
	if err != nil {
		return nil, fmt.Errorf("sentry: reading the image's root directory: %w", err)
	}
	if st.Mode&linux.S_IFMT != linux.S_IFDIR {
		return nil, fmt.Errorf("sentry: the image's root is not a directory (mode %#o)", st.Mode)
	}
	data := ""
	if sizeLimit > 0 {
		data = fmt.Sprintf("size=%d", sizeLimit)
	}
	upper, err := vfsObj.MountDisconnected(ctx, creds, "memory", tmpfs.Name, &vfs.MountOptions{
		GetFilesystemOptions: vfs.GetFilesystemOptions{
			InternalMount: true,
			Data:          data,
			InternalData: tmpfs.FilesystemOpts{
				RootFileType: linux.S_IFDIR,
				// The tmpfs default of half the memory would be too low a
				// cap for the root filesystem; sizeLimit replaces it.
				DisableDefaultSizeLimit: true,
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("sentry: creating the in-memory layer: %w", err)
	}
	upperRoot := vfs.MakeVirtualDentry(upper, upper.Root())
	err = vfsObj.SetStatAt(ctx, creds, &vfs.PathOperation{Root: upperRoot, Start: upperRoot}, &vfs.SetStatOptions{
		Stat: linux.Statx{
			Mask: linux.STATX_UID | linux.STATX_GID | linux.STATX_MODE,
			UID:  st.UID,
			GID:  st.GID,
			Mode: st.Mode,
		},
	})
	if err != nil {
		upper.DecRef(ctx)
		return nil, fmt.Errorf("sentry: copying the owner and mode of the image's root: %w", err)
	}
	return upper, nil
}
