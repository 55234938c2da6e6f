package host

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/netstack"
	"z.gfire.dev/gvx/core/sentry"
)

// snapshotHookAnnotation is the snapshot annotation holding the save
// hook's output.
const snapshotHookAnnotation = "hook"

// maxHookOutput bounds what a save hook may print.
const maxHookOutput = 4 << 20

// Checkpoint implements control.Backend.Checkpoint.
func (b *Backend) Checkpoint(ctx context.Context, req control.CheckpointRequest, w io.Writer) (control.CheckpointResult, error) {
	if !req.Stop && b.network != nil && b.network.Mode() == netstack.ModeNAT {
		// A running-on snapshot keeps the stack's interfaces, and the
		// NAT's eth0 is a host-side wire that cannot be saved.
		return control.CheckpointResult{}, control.Errorf(control.CodeInvalid, "a sandbox with --network nat can only be checkpointed with --stop (stop=True): its eth0 cannot be saved while the sandbox runs on")
	}
	var opts sentry.CheckpointOptions
	opts.Stop = req.Stop
	var saved string
	if b.snapshotHook != "" {
		out, err := b.runHook(ctx, "save", nil)
		if err != nil {
			return control.CheckpointResult{}, err
		}
		saved = out
		opts.Annotations = map[string]string{snapshotHookAnnotation: saved}
	}
	if b.network != nil {
		// Connections through published ports and the NAT end here:
		// their relays wait on guest sockets, which cannot be saved; new
		// ones wait.
		b.network.Suspend()
		defer b.network.Resume()
	}
	cw := &countingWriter{w: w}
	if req.Stop {
		// Set first: init dies inside Checkpoint.
		b.stoppedBySnapshot.Store(true)
	}
	if err := b.sb.Checkpoint(cw, opts); err != nil {
		b.stoppedBySnapshot.Store(false)
		return control.CheckpointResult{}, SandboxError(err)
	}
	return control.CheckpointResult{Bytes: cw.n, Hook: saved}, nil
}

// Checkpointed reports whether a checkpoint with Stop ended the sandbox:
// its init then exits, and the host should report success, not that
// init's status.
func (b *Backend) Checkpointed() bool { return b.stoppedBySnapshot.Load() }

// RestoreHook gives the image's snapshot hook, in a sandbox restored from
// a snapshot, what it saved. It does nothing for an image without one.
func (b *Backend) RestoreHook(ctx context.Context) error {
	if b.snapshotHook == "" {
		return nil
	}
	_, err := b.runHook(ctx, "restore", strings.NewReader(b.sb.RestoredAnnotations()[snapshotHookAnnotation]))
	return err
}

// runHook runs the snapshot hook with one argument as root and returns its
// output.
func (b *Backend) runHook(ctx context.Context, arg string, stdin io.Reader) (string, error) {
	var stdout, stderr bytes.Buffer
	out := &limitedWriter{w: &stdout, n: maxHookOutput}
	p, err := b.sb.Exec(ctx, sentry.ProcessSpec{
		Argv:   []string{b.snapshotHook, arg},
		Env:    b.defaults.Env,
		Cwd:    "/",
		Stdin:  stdin,
		Stdout: out,
		Stderr: &stderr,
	})
	if err != nil {
		return "", control.Errorf(control.CodeInvalid, "the image's snapshot hook (%s=%s): %v", image.SnapshotHookLabel, b.snapshotHook, err)
	}
	st, err := p.Wait()
	if err == nil && out.over {
		err = fmt.Errorf("it printed more than %d bytes", maxHookOutput)
	}
	if err == nil && st.ExitCode() != 0 {
		err = fmt.Errorf("exit status %d: %s", st.ExitCode(), strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		return "", control.Errorf(control.CodeInvalid, "the image's snapshot hook `%s %s` failed: %v", b.snapshotHook, arg, err)
	}
	return stdout.String(), nil
}

// countingWriter counts what passes to w.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// limitedWriter keeps the first n bytes and notes whether more came.
type limitedWriter struct {
	w    io.Writer
	n    int
	over bool
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if len(p) > l.n {
		l.over = true
		p = p[:l.n]
	}
	l.n -= len(p)
	l.w.Write(p)
	return len(p), nil
}
