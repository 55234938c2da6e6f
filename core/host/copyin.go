package host

import (
	"context"
	"errors"
	"fmt"
	"io"

	"z.gfire.dev/gvx/core/internal/hosttar"
	"z.gfire.dev/gvx/core/sentry"
)

// Copy is a host directory whose contents Run copies into a guest
// directory before init starts, as the SDK's UploadDir does once it runs.
type Copy struct {
	HostDir  string
	GuestDir string // absolute; made with its parents if missing
}

// copyIn copies each of copies into the booted sandbox, in order, the
// files belonging to owner (root if nil). It runs between the boot and
// init's start, the one time when both hold: the process can still open
// host files (the lockdown comes with init), and no guest code runs yet
// to change the guest directories under the copy. The copy is the Sentry's
// own extraction as guest root, so every path resolves inside the guest,
// whatever its symlinks say.
func copyIn(ctx context.Context, sb *sentry.Sandbox, copies []Copy, owner *sentry.Owner) error {
	for _, c := range copies {
		if err := copyOne(ctx, sb, c, owner); err != nil {
			return fmt.Errorf("copying %s into %s: %w", c.HostDir, c.GuestDir, err)
		}
	}
	return nil
}

func copyOne(ctx context.Context, sb *sentry.Sandbox, c Copy, owner *sentry.Owner) error {
	pr, pw := io.Pipe()
	archived := make(chan error, 1)
	go func() {
		err := hosttar.Write(c.HostDir, pw)
		pw.CloseWithError(err)
		archived <- err
	}()
	_, err := sb.CopyIn(ctx, c.GuestDir, pr, owner)
	// Stops the archiver if the sandbox gave up first, and waits for it:
	// once init starts, a host file opened by anyone kills the process.
	pr.CloseWithError(errStoppedReading)
	// The archiver's own error (an unreadable file) is the cause of the
	// broken stream the sandbox reports.
	if aerr := <-archived; aerr != nil && !errors.Is(aerr, errStoppedReading) {
		return aerr
	}
	return err
}

var errStoppedReading = errors.New("the sandbox stopped reading")

// owner is who files made for u belong to: nil for root, as the archive
// says.
func (u User) owner() *sentry.Owner {
	if u.UID == 0 && u.GID == 0 {
		return nil
	}
	return &sentry.Owner{UID: u.UID, GID: u.GID}
}
