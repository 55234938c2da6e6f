package disk

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrCorrupt is wrapped by every error that reports malformed on-disk data.
// It unwraps to unix.EIO, which is what the guest should see.
var ErrCorrupt error = corruptError{}

type corruptError struct{}

func (corruptError) Error() string { return "filesystem metadata is corrupt" }
func (corruptError) Unwrap() error { return unix.EIO }

// Corruptf returns an error wrapping ErrCorrupt.
func Corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}
