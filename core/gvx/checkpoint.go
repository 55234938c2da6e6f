package gvx

import (
	"context"
	"fmt"
	"io"
	"os"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/internal/atomicfile"
)

// CheckpointOptions controls Checkpoint.
type CheckpointOptions struct {
	// Stop ends the sandbox once the snapshot is written, without letting
	// the guest run again. A sandbox with volumes must stop: each
	// volume's image is then the snapshot's other half, to clone for each
	// restore. Without Stop the sandbox runs on.
	Stop bool
}

// Checkpoint writes a snapshot of the sandbox to the host file path
// (through a temporary file renamed when complete): its kernel, every
// process with its memory, and its root's writable layer. A sandbox made
// with Config.Restore set to path continues it, in a new process, without
// starting its programs again: a ready dockerd answers in a few hundred
// milliseconds instead of seconds.
//
// The sandbox must have no Exec running. See `rungv checkpoint --help` for
// what a snapshot leaves out and the image snapshot hooks that carry it.
func (sb *Sandbox) Checkpoint(ctx context.Context, path string, opts CheckpointOptions) (CheckpointResult, error) {
	var res CheckpointResult
	var callErr error
	err := atomicfile.Write(path, func(f *os.File) error {
		res, callErr = sb.CheckpointTo(ctx, f, opts)
		return callErr
	})
	if err != nil && err != callErr {
		return res, fmt.Errorf("gvx: checkpoint: writing %s: %w", path, err)
	}
	return res, err
}

// CheckpointTo is Checkpoint writing the snapshot to w.
func (sb *Sandbox) CheckpointTo(ctx context.Context, w io.Writer, opts CheckpointOptions) (CheckpointResult, error) {
	res, err := sb.client.Checkpoint(ctx, control.CheckpointRequest{Stop: opts.Stop}, w)
	return res, sb.callError(err)
}
