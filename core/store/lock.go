package store

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// fileLock is an exclusive flock(2) on a lock file. The kernel drops it
// when the holder dies, so a crashed pull never wedges the cache.
type fileLock struct{ f *os.File }

const lockPoll = 50 * time.Millisecond

// lockFile takes an exclusive lock on path, creating the file, waiting as
// long as ctx allows.
func lockFile(ctx context.Context, path string) (*fileLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &fileLock{f}, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the lock %s (another gvx process is working on it): %w", path, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

// tryLockFile takes the lock only if it is free; held reports whether
// another process holds it.
func tryLockFile(path string) (l *fileLock, held bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, true, nil
		}
		return nil, false, err
	}
	return &fileLock{f}, false, nil
}

func (l *fileLock) unlock() {
	// Closing the file releases the flock.
	l.f.Close()
}
