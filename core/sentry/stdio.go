package sentry

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/cleanup"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/fd"
	"gvisor.dev/gvisor/pkg/sentry/fdimport"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/host"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
)

// stdio is the guest's standard streams and the relays that feed them.
type stdio struct {
	fdTable *kernel.FDTable
	tty     *host.TTYFileDescription
	input   *inputRelay
	outputs []*outputRelay
	// imported are the guest descriptors (of 0, 1, 2) that are host
	// files; a snapshot records init's, for Restore to re-bind.
	imported []int
}

// newStdio builds the file descriptor table of a new process from spec's
// streams. The relays are not running yet; see start.
func newStdio(ctx context.Context, k *kernel.Kernel, spec *ProcessSpec, isInit bool) (*stdio, error) {
	if spec.TTY {
		return newTTYStdio(ctx, k, spec)
	}
	st := &stdio{fdTable: k.NewFDTable()}
	if spec.noStdio {
		return st, nil
	}
	cu := cleanup.Make(func() { st.release(ctx) })
	defer cu.Clean()

	hostFDs := make(map[int]*fd.FD)
	defer closeFDs(hostFDs)
	switch f, isFile := spec.Stdin.(*os.File); {
	case isFile && f != nil && !isRegular(f):
		if err := dupInto(hostFDs, 0, f); err != nil {
			return nil, err
		}
	case (isFile && f == nil) || spec.Stdin == nil:
		if err := st.pipeIn(ctx, k, nil); err != nil {
			return nil, err
		}
	default:
		if err := st.pipeIn(ctx, k, spec.Stdin); err != nil {
			return nil, err
		}
	}
	outputs := []io.Writer{1: spec.Stdout, 2: spec.Stderr}
	if spec.StderrToStdout {
		// Descriptor 2 is descriptor 1's file, shared after the import.
		outputs = outputs[:2]
	}
	for guestFD, w := range outputs {
		if guestFD == 0 {
			continue
		}
		f, isFile := w.(*os.File)
		switch {
		case isFile && f != nil && !isRegular(f):
			if err := dupInto(hostFDs, guestFD, f); err != nil {
				return nil, err
			}
			continue
		case (isFile && f == nil) || w == nil:
			w = io.Discard
		}
		if err := st.pipeOut(ctx, k, int32(guestFD), w); err != nil {
			return nil, err
		}
	}
	for guestFD := range hostFDs {
		st.imported = append(st.imported, guestFD)
	}
	sort.Ints(st.imported)
	if _, err := fdimport.Import(ctx, st.fdTable, hostFDs, importOptions(spec, false, isInit)); err != nil {
		return nil, fmt.Errorf("sentry: importing host stdio: %w", err)
	}
	if spec.StderrToStdout {
		if err := st.dup(ctx, 1, 2); err != nil {
			return nil, err
		}
	}
	cu.Release()
	return st, nil
}

// newTTYStdio makes the host terminal in spec the guest's console.
func newTTYStdio(ctx context.Context, k *kernel.Kernel, spec *ProcessSpec) (*stdio, error) {
	in, okIn := spec.Stdin.(*os.File)
	out, okOut := spec.Stdout.(*os.File)
	errw, okErr := spec.Stderr.(*os.File)
	if !okIn || !okOut || !okErr || in == nil || out == nil || errw == nil {
		return nil, errors.New("sentry: a TTY process needs Stdin, Stdout and Stderr to be the host terminal (*os.File)")
	}
	if _, err := unix.IoctlGetTermios(int(in.Fd()), unix.TCGETS); err != nil {
		return nil, fmt.Errorf("sentry: TTY requested but stdin is not a terminal: %w", err)
	}
	hostFDs := make(map[int]*fd.FD)
	defer closeFDs(hostFDs)
	for guestFD, f := range []*os.File{in, out, errw} {
		if err := dupInto(hostFDs, guestFD, f); err != nil {
			return nil, err
		}
	}
	st := &stdio{fdTable: k.NewFDTable()}
	tty, err := fdimport.Import(ctx, st.fdTable, hostFDs, importOptions(spec, true, false))
	if err != nil {
		st.release(ctx)
		return nil, fmt.Errorf("sentry: importing the host terminal: %w", err)
	}
	st.tty = tty
	return st, nil
}

// importOptions is how a process's host streams are imported.
//
// Init's streams are restorable: a snapshot names them, and Restore binds
// the restored init to the new process's streams (see Checkpoint).
func importOptions(spec *ProcessSpec, console, isInit bool) fdimport.ImportOptions {
	opts := fdimport.ImportOptions{
		Console: console,
		// Imported descriptors appear owned by the guest user, as a
		// terminal or pipe handed to a container is.
		UID:         auth.KUID(spec.UID),
		GID:         auth.KGID(spec.GID),
		SupportTTYs: true,
	}
	if isInit {
		opts.ContainerName = initStdioContainer
		opts.Restorable = true
	}
	return opts
}

// isRegular reports whether f is a regular file. Those are relayed rather
// than imported: the Sentry accesses an imported file with pread/pwrite at
// its own offset, starting at 0, so `cmd >> log` or a shell's `{ ...; } >
// out` would overwrite what is there and leave the shared offset behind.
// A relay writes through f, at and advancing the real offset.
func isRegular(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode().IsRegular()
}

// dupInto duplicates f's descriptor as the host end of guest descriptor
// guestFD. The caller keeps f.
func dupInto(fds map[int]*fd.FD, guestFD int, f *os.File) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("sentry: stdio %d: %w", guestFD, err)
	}
	var dupErr error
	var nfd int
	if err := sc.Control(func(hfd uintptr) {
		nfd, dupErr = unix.FcntlInt(hfd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return fmt.Errorf("sentry: stdio %d: %w", guestFD, err)
	}
	if dupErr != nil {
		return fmt.Errorf("sentry: duplicating the host descriptor for stdio %d: %w", guestFD, dupErr)
	}
	fds[guestFD] = fd.New(nfd)
	return nil
}

// closeFDs closes the descriptors fdimport did not take.
func closeFDs(fds map[int]*fd.FD) {
	for _, f := range fds {
		if f.FD() >= 0 {
			f.Close()
		}
	}
}

// pipeIn connects guest descriptor 0 to src through a pipe.
func (st *stdio) pipeIn(ctx context.Context, k *kernel.Kernel, src io.Reader) error {
	r, w, err := newPipe(ctx, k)
	if err != nil {
		return err
	}
	defer r.DecRef(ctx)
	if err := setNonblocking(ctx, w); err != nil {
		w.DecRef(ctx)
		return fmt.Errorf("sentry: stdin pipe: %w", err)
	}
	st.input = newInputRelay(ctx, w, src)
	return st.install(ctx, 0, r)
}

// pipeOut connects guest descriptor guestFD to dst through a pipe.
func (st *stdio) pipeOut(ctx context.Context, k *kernel.Kernel, guestFD int32, dst io.Writer) error {
	r, w, err := newPipe(ctx, k)
	if err != nil {
		return err
	}
	defer w.DecRef(ctx)
	if err := setNonblocking(ctx, r); err != nil {
		r.DecRef(ctx)
		return fmt.Errorf("sentry: output pipe %d: %w", guestFD, err)
	}
	st.outputs = append(st.outputs, newOutputRelay(ctx, r, dst))
	return st.install(ctx, guestFD, w)
}

// install puts file at guestFD in the table, taking its own reference.
func (st *stdio) install(ctx context.Context, guestFD int32, file *vfs.FileDescription) error {
	displaced, err := st.fdTable.NewFDAt(ctx, guestFD, file, kernel.FDFlags{})
	if err != nil {
		return fmt.Errorf("sentry: installing stdio %d: %w", guestFD, err)
	}
	if displaced != nil {
		displaced.DecRef(ctx)
	}
	return nil
}

// dup makes guest descriptor to refer to the file at from, as dup2 does:
// one open file description, so writes through either keep their order.
func (st *stdio) dup(ctx context.Context, from, to int32) error {
	file, _ := st.fdTable.Get(from)
	if file == nil {
		return fmt.Errorf("sentry: stdio %d to duplicate as %d is not open", from, to)
	}
	defer file.DecRef(ctx)
	return st.install(ctx, to, file)
}

// start runs the relays.
func (st *stdio) start() {
	if st.input != nil {
		go st.input.run()
	}
	for _, o := range st.outputs {
		go o.run()
	}
}

// release drops what newStdio built when the process was never created.
// Relays that never ran drop their pipe ends here.
func (st *stdio) release(ctx context.Context) {
	st.fdTable.DecRef(ctx)
	st.dropRelays(ctx)
}

// dropRelays drops the pipe ends of relays that will never run.
func (st *stdio) dropRelays(ctx context.Context) {
	if st.input != nil {
		st.input.w.DecRef(ctx)
		st.input = nil
	}
	for _, o := range st.outputs {
		o.r.DecRef(ctx)
	}
	st.outputs = nil
}
