// Package flock is an exclusive flock(2) on a lock file, the way gvx's
// caches (images, built test and Docker images) let several processes
// share them, and a shared or exclusive flock on a file already open (a
// volume image) that names its holder when it is taken. The kernel drops a
// lock when its holder dies, so a crashed process never wedges anything.
package flock

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
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

// HeldError is TryFile's error when another open file description holds a
// conflicting lock on the file.
type HeldError struct {
	// PID is the process that took the lock, or 0 if the kernel does not
	// say (/proc/locks is missing, or the holder is in another PID
	// namespace).
	PID int
	// Command is the holder's name (/proc/PID/comm), if known.
	Command string
	// Exclusive reports whether the holder's lock is exclusive.
	Exclusive bool
}

func (e *HeldError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = fmt.Sprintf("process %d", e.PID)
		if e.Command != "" {
			who += " (" + e.Command + ")"
		}
	}
	return "flock: the file is locked by " + who
}

// heldGrace bounds how long TryFile waits for a lock whose holder has
// exited: the lock goes with the last descriptor of its open file, which
// children sharing the holder's descriptor table (gVisor's stubs) keep for
// a moment after the holder is killed.
const heldGrace = 2 * time.Second

// TryFile takes a shared or exclusive flock(2) on the open file f without
// waiting for a live holder. The lock belongs to f's open file
// description: it conflicts with locks taken through other open(2)s of the
// same file, in this process too, and goes when the description's last
// descriptor closes, also when its process is killed. A conflict is a
// *HeldError naming the holder as far as /proc/locks tells.
func TryFile(f *os.File, exclusive bool) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	deadline := time.Now().Add(heldGrace)
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case err == unix.EINTR:
			continue
		case err != unix.EWOULDBLOCK:
			return fmt.Errorf("flock: locking %s: %w", f.Name(), err)
		}
		held := holder(f)
		if held.PID <= 0 || alive(held.PID) || time.Now().After(deadline) {
			return held
		}
		time.Sleep(lockPoll)
	}
}

// holder finds the flock on f's file that /proc/locks lists.
func holder(f *os.File) *HeldError {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &HeldError{}
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return &HeldError{}
	}
	// "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; a waiter's line
	// has "->" after the number.
	dev := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	var byIno *HeldError
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[1] != "FLOCK" {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil {
			continue
		}
		h := &HeldError{PID: pid, Exclusive: fields[3] == "WRITE"}
		if fields[5] == dev {
			byIno = h
			break
		}
		// Stacking filesystems (overlayfs) lock the inode underneath,
		// on another device.
		if id := strings.Split(fields[5], ":"); byIno == nil && len(id) == 3 && id[2] == strconv.FormatUint(st.Ino, 10) {
			byIno = h
		}
	}
	if byIno == nil {
		return &HeldError{}
	}
	if byIno.PID > 0 {
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", byIno.PID)); err == nil {
			byIno.Command = strings.TrimSpace(string(comm))
		}
	}
	return byIno
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}
