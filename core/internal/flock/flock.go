// Package flock is an exclusive flock(2) on a lock file, the way gvx's
// caches (images, built test and Docker images) let several processes
// share them. The kernel drops a lock when its holder dies, so a crashed
// process never wedges a cache.
package flock

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Lock is a held lock.
type Lock struct{ f *os.File }

const lockPoll = 50 * time.Millisecond

// Acquire takes an exclusive lock on path, creating the file, waiting as
// long as ctx allows.
func Acquire(ctx context.Context, path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &Lock{f}, nil
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

// TryAcquire takes the lock only if it is free; held reports whether
// another process holds it.
func TryAcquire(path string) (l *Lock, held bool, err error) {
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
	return &Lock{f}, false, nil
}

// Release releases the lock.
func (l *Lock) Release() {
	// Closing the file releases the flock.
	l.f.Close()
}
