package ext4fs

import (
	"errors"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/log"

	"z.gfire.dev/gvx/core/ext4lite"
)

// errno converts an error from ext4lite into the error the guest sees.
// Expected conditions keep their errno; corruption, device failures,
// internal errors and operations on a failed or closed filesystem become
// EIO and are logged, since the guest only learns "I/O error".
func errno(err error) error {
	if err == nil {
		return nil
	}
	var e unix.Errno
	switch {
	case errors.Is(err, ext4lite.ErrClosed):
		return linuxerr.EIO
	case errors.Is(err, ext4lite.ErrCorrupt), errors.Is(err, ext4lite.ErrInternal), errors.Is(err, ext4lite.ErrFailed):
		log.Warningf("ext4fs: %v", err)
		return linuxerr.EIO
	case errors.As(err, &e):
		if e == unix.EIO {
			log.Warningf("ext4fs: %v", err)
		}
		if e == unix.ESTALE {
			// An inode freed under us: the name is gone.
			return linuxerr.ENOENT
		}
		return linuxerr.ErrorFromUnix(e)
	}
	log.Warningf("ext4fs: unexpected error from ext4lite: %v", err)
	return linuxerr.EIO
}

// isErrno reports whether err, from ext4lite, carries errno e.
func isErrno(err error, e unix.Errno) bool {
	return errors.Is(err, e)
}
