package sentry

import (
	"fmt"
	"os"

	"gvisor.dev/gvisor/pkg/memutil"
	"gvisor.dev/gvisor/pkg/sentry/pgalloc"
)

// memoryFileName names the memfd that backs all guest memory, tmpfs and the
// root filesystem's writable layer. It shows up in /proc/<pid>/maps.
const memoryFileName = "gvx-memory"

// newMemoryFile creates the sandbox's memory file on an anonymous memfd, so
// guest memory never touches a host filesystem and vanishes with the
// process.
func newMemoryFile() (*pgalloc.MemoryFile, error) {
	fd, err := memutil.CreateMemFD(memoryFileName, 0)
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
