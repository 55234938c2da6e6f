package sentry

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/sentry/devices/memdev"
	"gvisor.dev/gvisor/pkg/sentry/devices/ttydev"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/cgroup2fs"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/cgroupfs"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/dev"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/devpts"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/devtmpfs"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/erofs"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/mqfs"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/overlay"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/proc"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/sys"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/tmpfs"
	"gvisor.dev/gvisor/pkg/sentry/vfs"

	"z.gfire.dev/gvx/core/sentry/ext4fs"
)

// registerFilesystems makes the filesystem types and devices of the sandbox
// known to its VFS.
//
// Guest root may mount the types Docker needs (cgroup, cgroup2, overlay,
// tmpfs, devpts, mqueue, proc, sysfs, devtmpfs). It may not mount erofs
// (its only option is a host descriptor number), ext4 (volumes come from
// the host) or dev (the loader's /dev).
func registerFilesystems(vfsObj *vfs.VirtualFilesystem) error {
	userMountable := &vfs.RegisterFilesystemTypeOptions{AllowUserMount: true, AllowUserList: true}
	listedOnly := &vfs.RegisterFilesystemTypeOptions{AllowUserList: true}

	vfsObj.MustRegisterFilesystemType(cgroupfs.Name, &cgroupfs.FilesystemType{}, userMountable)
	vfsObj.MustRegisterFilesystemType(cgroup2fs.Name, &cgroup2fs.FilesystemType{}, userMountable)
	vfsObj.MustRegisterFilesystemType(devpts.Name, &devpts.FilesystemType{}, userMountable)
	vfsObj.MustRegisterFilesystemType(devtmpfs.Name, &devtmpfs.FilesystemType{}, userMountable)
	vfsObj.MustRegisterFilesystemType(mqfs.Name, &mqfs.FilesystemType{}, userMountable)
	// Our overlay type wraps gVisor's (see overlayType).
	vfsObj.MustRegisterFilesystemType(overlay.Name, &overlayType{}, userMountable)
	vfsObj.MustRegisterFilesystemType(proc.Name, &proc.FilesystemType{}, userMountable)
	vfsObj.MustRegisterFilesystemType(sys.Name, &sys.FilesystemType{}, userMountable)
	vfsObj.MustRegisterFilesystemType(tmpfs.Name, &tmpfs.FilesystemType{}, userMountable)
	vfsObj.MustRegisterFilesystemType(dev.Name, &dev.FilesystemType{}, &vfs.RegisterFilesystemTypeOptions{})
	vfsObj.MustRegisterFilesystemType(erofs.Name, &erofs.FilesystemType{}, listedOnly)
	// ext4 volumes are mounted by the loader only (Config.Volumes).
	vfsObj.MustRegisterFilesystemType(ext4fs.Name, &ext4fs.FilesystemType{}, listedOnly)

	if err := memdev.Register(vfsObj); err != nil {
		return fmt.Errorf("sentry: registering memory devices (/dev/null, zero, full, random, urandom): %w", err)
	}
	if err := ttydev.Register(vfsObj); err != nil {
		return fmt.Errorf("sentry: registering /dev/tty: %w", err)
	}
	return nil
}
