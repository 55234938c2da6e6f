package ext4lite

import (
	"errors"
	"fmt"
	"runtime/debug"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// ErrCorrupt is wrapped by every error reporting corrupt on-disk metadata.
// Such errors unwrap to unix.EIO.
var ErrCorrupt = disk.ErrCorrupt

// ErrFailed is wrapped by the errors of every operation after the
// filesystem hit an I/O error or corruption in the middle of a change. The
// filesystem then refuses further changes and never commits the change it
// was making, so the image keeps its last committed state.
var ErrFailed = errors.New("ext4lite: filesystem failed earlier and is read-only now")

func corruptf(format string, args ...any) error {
	return disk.Corruptf(format, args...)
}

// ErrInternal is wrapped by errors that stand for a panic inside ext4lite:
// a bug, or corruption no check caught. They match unix.EIO too. After one
// in a change, the filesystem fails (see ErrFailed).
var ErrInternal = errors.New("ext4lite: internal error")

// recoverPanics turns panics in operations into ErrInternal. Tests turn it
// off so that fuzzing sees the panics.
var recoverPanics = true

// internalError converts a recovered panic value, or re-panics when
// recovering is off.
func internalError(r any) error {
	if !recoverPanics {
		panic(r)
	}
	return fmt.Errorf("%w: %v\n%s: %w", ErrInternal, r, debug.Stack(), unix.EIO)
}

// ioErr wraps an error from the device so that it also matches unix.EIO.
type ioErr struct{ err error }

func (e ioErr) Error() string   { return e.err.Error() }
func (e ioErr) Unwrap() []error { return []error{e.err, unix.EIO} }

func ioError(err error) error {
	if err == nil {
		return nil
	}
	return ioErr{err}
}

// isFatal reports whether err, returned by an operation that already
// changed metadata, leaves the running transaction unusable. Plain errnos
// are the outcome of checks that precede every change; anything else (I/O
// errors, corruption) can strike in the middle.
func isFatal(err error) bool {
	var errno unix.Errno
	if errors.As(err, &errno) && !errors.Is(err, ErrCorrupt) && errno != unix.EIO {
		return false
	}
	return true
}

// errnof wraps an errno with context.
func errnof(errno unix.Errno, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errno)
}
