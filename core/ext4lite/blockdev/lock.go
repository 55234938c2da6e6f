package blockdev

import (
	"errors"
	"fmt"
	"os"

	"z.gfire.dev/gvx/core/internal/flock"
	"z.gfire.dev/gvx/core/internal/hostfile"
)

// ErrInUse is wrapped by the error of opening an image that another open
// file holds in a conflicting way. A host file has one writer at a time or
// any number of readers: a writer takes an exclusive flock(2) on the file
// it opened, a reader (a read-only volume, a clone's golden, a copy's
// source) a shared one. The lock lives as long as the open file — a whole
// sandbox, since rungv opens its volumes once — and the kernel drops it
// when the process dies, even by SIGKILL.
var ErrInUse = errors.New("blockdev: the image is in use")

// openImage opens a user-named image or delta file without ever blocking
// on something that is not one (a FIFO, a character device).
func openImage(path string, readOnly bool) (*os.File, error) {
	flag := os.O_RDWR
	if readOnly {
		flag = os.O_RDONLY
	}
	return hostfile.Open(path, flag, hostfile.Regular|hostfile.BlockDevice)
}

// lockImage takes f's lock: shared if readOnly, else exclusive. See
// ErrInUse.
func lockImage(f *os.File, readOnly bool) error {
	err := flock.TryFile(f, !readOnly)
	var held *flock.HeldError
	if !errors.As(err, &held) {
		return err
	}
	how := "read-only"
	if held.Exclusive {
		how = "read-write"
	}
	why := "a writer needs it alone"
	if held.Exclusive {
		why = "it has one writer at a time"
	}
	if held.PID == os.Getpid() {
		return fmt.Errorf("%w: %s is already open %s in this process (is it mounted twice?); %s: mount it once, or mount a clone (rungv volume clone)", ErrInUse, f.Name(), how, why)
	}
	who := "another sandbox or process"
	if held.PID > 0 {
		who = fmt.Sprintf("process %d", held.PID)
		if held.Command != "" {
			who += " (" + held.Command + ")"
		}
	}
	return fmt.Errorf("%w: %s is open %s by %s; %s: wait for it to end, or give each sandbox its own clone (rungv volume clone)", ErrInUse, f.Name(), how, who, why)
}
