package sentry

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/dev"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/devpts"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/mqfs"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/proc"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/sys"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/tmpfs"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
)

// submount is a filesystem the loader mounts in every sandbox.
type submount struct {
	target string
	fsType string
	flags  vfs.MountFlags
	data   string
	// internalData returns the filesystem's InternalData; nil for none.
	internalData func() any
	// onlyIfEmpty skips the mount when the image has content at target,
	// which would otherwise be hidden.
	onlyIfEmpty bool
}

var (
	noSUIDDevExec = vfs.MountFlags{NoSUID: true, NoDev: true, NoExec: true}
	noSUIDDev     = vfs.MountFlags{NoSUID: true, NoDev: true}
)

// standardMounts are mounted in order; a target's parent is mounted first.
var standardMounts = []submount{
	{target: "/proc", fsType: proc.Name, flags: noSUIDDevExec, internalData: func() any { return &proc.InternalData{} }},
	{target: "/sys", fsType: sys.Name, flags: noSUIDDevExec, internalData: func() any { return &sys.InternalData{} }},
	// dev is a tmpfs populated with null, zero, full, random, urandom, tty,
	// the ptmx symlink and the pts and shm directories.
	{target: "/dev", fsType: dev.Name, flags: vfs.MountFlags{NoSUID: true}},
	{target: "/dev/pts", fsType: devpts.Name, flags: vfs.MountFlags{NoSUID: true, NoExec: true}},
	{target: "/dev/mqueue", fsType: mqfs.Name, flags: noSUIDDevExec},
	{target: "/tmp", fsType: tmpfs.Name, flags: noSUIDDev, data: "mode=1777", onlyIfEmpty: true},
	{target: "/run", fsType: tmpfs.Name, flags: noSUIDDev, data: "mode=755", onlyIfEmpty: true},
}

// mountStandard mounts standardMounts into mns, creating mount points.
func mountStandard(ctx context.Context, vfsObj *vfs.VirtualFilesystem, creds *auth.Credentials, mns *vfs.MountNamespace) error {
	root := mns.Root(ctx)
	defer root.DecRef(ctx)
	for _, m := range standardMounts {
		if err := m.mount(ctx, vfsObj, creds, root); err != nil {
			return err
		}
	}
	return nil
}

func (m *submount) mount(ctx context.Context, vfsObj *vfs.VirtualFilesystem, creds *auth.Credentials, root vfs.VirtualDentry) error {
	if m.onlyIfEmpty {
		empty, err := emptyOrMissing(ctx, vfsObj, creds, root, m.target)
		if err != nil {
			return err
		}
		if !empty {
			return nil
		}
	}
	if err := vfsObj.MkdirAllAt(ctx, m.target, root, creds, &vfs.MkdirOptions{Mode: 0o755, ForSyntheticMountpoint: true}, true /* mustBeDir */); err != nil {
		return fmt.Errorf("sentry: creating mount point %s: %w", m.target, err)
	}
	opts := &vfs.MountOptions{
		Flags: m.flags,
		GetFilesystemOptions: vfs.GetFilesystemOptions{
			Data: m.data,
			// Internal: the loader mounts with the kernel's authority, and
			// the dev type refuses anything else (ENODEV).
			InternalMount: true,
		},
	}
	if m.internalData != nil {
		opts.GetFilesystemOptions.InternalData = m.internalData()
	}
	pop := pathAt(root, m.target, true)
	// MountAt returns the mount without a reference: the VFS holds the
	// only one until it is unmounted.
	if _, err := vfsObj.MountAt(ctx, creds, m.fsType, pop, m.fsType, opts); err != nil {
		return fmt.Errorf("sentry: mounting %s on %s: %w", m.fsType, m.target, err)
	}
	return nil
}

// emptyOrMissing reports whether path is absent or an empty directory.
func emptyOrMissing(ctx context.Context, vfsObj *vfs.VirtualFilesystem, creds *auth.Credentials, root vfs.VirtualDentry, path string) (bool, error) {
	fd, err := vfsObj.OpenAt(ctx, creds, pathAt(root, path, true), &vfs.OpenOptions{Flags: linux.O_RDONLY | linux.O_DIRECTORY})
	switch {
	case linuxerr.Equals(linuxerr.ENOENT, err):
		return true, nil
	case linuxerr.Equals(linuxerr.ENOTDIR, err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("sentry: opening %s in the image: %w", path, err)
	}
	defer fd.DecRef(ctx)
	empty := true
	err = fd.IterDirents(ctx, vfs.IterDirentsCallbackFunc(func(d vfs.Dirent) error {
		if d.Name != "." && d.Name != ".." {
			empty = false
			return linuxerr.ENOTEMPTY
		}
		return nil
	}))
	if err != nil && !linuxerr.Equals(linuxerr.ENOTEMPTY, err) {
		return false, fmt.Errorf("sentry: listing %s in the image: %w", path, err)
	}
	return empty, nil
}
