package sentry

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/memutil"
	"gvisor.dev/gvisor/pkg/sentry/pgalloc"
	"gvisor.dev/gvisor/pkg/sentry/usage"
)

// memoryFileName names the memfd that backs all guest memory, tmpfs and the
// root filesystem's writable layer. It shows up in /proc/<pid>/maps.
const memoryFileName = "gvx-memory"

// newMemoryFile creates the sandbox's memory file on an anonymous memfd, so
// guest memory never touches a host filesystem and vanishes with the
// process.
func newMemoryFile() (*pgalloc.MemoryFile, error) {
	// Sealing is allowed so capMemoryFile can fix the file's size.
	fd, err := memutil.CreateMemFD(memoryFileName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("sentry: creating the memory file (memfd_create): %w", err)
	}
	f := os.NewFile(uintptr(fd), memoryFileName)
	mf, err := pgalloc.NewMemoryFile(f, pgalloc.MemoryFileOpts{})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("sentry: creating the memory allocator: %w", err)
	}
	return mf, nil
}

// memoryChunk is the unit in which pgalloc grows its file (1 GiB).
const memoryChunk = 1 << 30

// capMemoryFile sets a hard ceiling on the memory file, and so on all the
// sandbox's memory, above limit: the file is grown to the next whole chunk
// above limit and sealed against growing (F_SEAL_GROW). Allocations beyond
// the ceiling then fail inside the Sentry (the guest sees ENOMEM, EFAULT or
// SIGBUS) instead of consuming host memory.
//
// The OOM killer enforces limit itself, but only between system calls: a
// single read(2) from /dev/zero into a 20 GiB buffer would commit all of it
// before the killer's SIGKILL takes effect. The ceiling bounds that to at
// most one chunk above the limit.
//
// Preconditions: mf was created by newMemoryFile; the kernel's initial
// allocations (VDSO) are done.
func capMemoryFile(mf *pgalloc.MemoryFile, limit uint64) error {
	ceiling := (limit/memoryChunk + 1) * memoryChunk
	if size := mf.TotalSize(); size < ceiling {
		// An uncommitted allocation of the missing size makes pgalloc
		// add exactly the missing chunks; freeing it commits nothing.
		fr, err := mf.Allocate(ceiling-size, pgalloc.AllocOpts{Kind: usage.System, Mode: pgalloc.AllocateUncommitted})
		if err != nil {
			return fmt.Errorf("sentry: growing the memory file to its ceiling of %d bytes: %w", ceiling, err)
		}
		mf.DecRef(fr)
	}
	if size := mf.TotalSize(); size != ceiling {
		return fmt.Errorf("sentry: the memory file is %d bytes, want %d; pgalloc's chunk size changed?", size, ceiling)
	}
	if _, err := unix.FcntlInt(uintptr(mf.FD()), unix.F_ADD_SEALS, unix.F_SEAL_GROW); err != nil {
		return fmt.Errorf("sentry: sealing the memory file at %d bytes: %w", ceiling, err)
	}
	return nil
}
