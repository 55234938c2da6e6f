package sentry

import (
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/kernel"

	"z.gfire.dev/gvx/core/sentry/ext4fs"
)

// installFallocate lets fallocate(2) modes other than 0 (KEEP_SIZE,
// PUNCH_HOLE, ZERO_RANGE) reach files on ext4 volumes, which implement
// them. gVisor's fallocate refuses every non-zero mode before asking the
// file, because its own filesystems would treat them as mode 0; for
// every other file it still does.
func installFallocate() { wrapSyscalls([]string{"fallocate"}, fallocateModes) }

// fallocateModes returns fn extended to pass non-zero modes to ext4
// volume files.
func fallocateModes(fn kernel.SyscallFn) kernel.SyscallFn {
	return func(t *kernel.Task, sysno uintptr, args arch.SyscallArguments) (uintptr, *kernel.SyscallControl, error) {
		mode := args[1].Uint64()
		if mode == 0 {
			return fn(t, sysno, args)
		}
		file := t.GetFile(args[0].Int())
		if file == nil {
			return 0, nil, linuxerr.EBADF
		}
		defer file.DecRef(t)
		if !ext4fs.IsVolumeFile(file) {
			return fn(t, sysno, args)
		}
		offset, length := args[2].Int64(), args[3].Int64()
		if offset < 0 || length <= 0 {
			return 0, nil, linuxerr.EINVAL
		}
		if offset+length < 0 {
			return 0, nil, linuxerr.EFBIG
		}
		// The file checks writability, the size limit (SIGXFSZ) and
		// the mode.
		return 0, nil, file.Allocate(t, mode, uint64(offset), uint64(length))
	}
}
