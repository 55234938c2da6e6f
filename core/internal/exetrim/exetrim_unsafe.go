package exetrim

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Trim drops this process's page-table entries for the ranges. The pages
// stay in the page cache; the next access maps them again from there. It
// opens nothing, so it works after lockdown (madvise is on every allowlist).
func (r *Ranges) Trim() error {
	for _, s := range r.spans {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, s.start, s.end-s.start, unix.MADV_DONTNEED); errno != 0 {
			return fmt.Errorf("madvise(%#x, %d, MADV_DONTNEED): %w", s.start, s.end-s.start, errno)
		}
	}
	return nil
}
