package sentry

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/pipefs"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
	"gvisor.dev/gvisor/pkg/usermem"
	"gvisor.dev/gvisor/pkg/waiter"
)

// relayBufferSize is the unit of copying between host streams and sandbox
// pipes; it matches the default pipe capacity.
const relayBufferSize = 64 << 10

// relayBuffers recycles relay buffers: every exec runs two output relays,
// and fresh 64 KiB buffers were 40% of the memory an exec of `true`
// allocated, so of the garbage collector's work.
var relayBuffers = sync.Pool{New: func() any { return new([relayBufferSize]byte) }}

// errRelayStopped is returned by waits that were cut short by stop.
var errRelayStopped = errors.New("relay stopped")

// newPipe creates a pipe inside the sandbox. The host end is non-blocking;
// the guest end is blocking, as pipe(2) would make it.
func newPipe(ctx context.Context, k *kernel.Kernel) (r, w *vfs.FileDescription, err error) {
	r, w, err = pipefs.NewConnectedPipeFDs(ctx, k.PipeMount(), 0)
	if err != nil {
		return nil, nil, fmt.Errorf("sentry: creating a pipe for stdio: %w", err)
	}
	return r, w, nil
}

// setNonblocking makes fd non-blocking, for the host side of a pipe: the
// relay goroutines are not tasks and must never block inside the Sentry.
func setNonblocking(ctx context.Context, fd *vfs.FileDescription) error {
	return fd.SetStatusFlags(ctx, nil, fd.StatusFlags()|linux.O_NONBLOCK)
}

// waitReady blocks until fd is ready for mask or stop is closed.
func waitReady(fd *vfs.FileDescription, mask waiter.EventMask, stop <-chan struct{}) error {
	e, ch := waiter.NewChannelEntry(mask | waiter.EventHUp | waiter.EventErr)
	if err := fd.EventRegister(&e); err != nil {
		return err
	}
	defer fd.EventUnregister(&e)
	if fd.Readiness(mask|waiter.EventHUp|waiter.EventErr) != 0 {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-stop:
		return errRelayStopped
	}
}

// outputRelay copies what the guest writes into a pipe to a host Writer.
type outputRelay struct {
	ctx  context.Context
	r    *vfs.FileDescription // host end, owned
	dst  io.Writer
	stop chan struct{}
	once sync.Once
	done chan struct{}
	err  error
}

func newOutputRelay(ctx context.Context, r *vfs.FileDescription, dst io.Writer) *outputRelay {
	return &outputRelay{ctx: ctx, r: r, dst: dst, stop: make(chan struct{}), done: make(chan struct{})}
}

// run copies until the guest closes its end, the Writer fails, or abort.
func (o *outputRelay) run() {
	defer close(o.done)
	defer o.r.DecRef(o.ctx)
	pooled := relayBuffers.Get().(*[relayBufferSize]byte)
	defer relayBuffers.Put(pooled)
	buf := pooled[:]
	for {
		n, err := o.r.Read(o.ctx, usermem.BytesIOSequence(buf), vfs.ReadOptions{})
		if n > 0 {
			if _, werr := o.dst.Write(buf[:n]); werr != nil {
				o.err = fmt.Errorf("sentry: writing guest output: %w", werr)
				return
			}
			continue
		}
		switch {
		case err == nil || err == io.EOF:
			return // every guest writer closed the pipe
		case linuxerr.Equals(linuxerr.ErrWouldBlock, err):
			if werr := waitReady(o.r, waiter.ReadableEvents, o.stop); werr != nil {
				return // aborted: the rest of the output is dropped.
			}
		default:
			o.err = fmt.Errorf("sentry: reading guest output: %w", err)
			return
		}
	}
}

// abort makes run return at its next wait.
func (o *outputRelay) abort() { o.once.Do(func() { close(o.stop) }) }

// inputRelay copies a host Reader into a pipe the guest reads.
type inputRelay struct {
	ctx  context.Context
	w    *vfs.FileDescription // host end, owned
	src  io.Reader
	stop chan struct{}
	once sync.Once
	done chan struct{} // closed when run returns
}

func newInputRelay(ctx context.Context, w *vfs.FileDescription, src io.Reader) *inputRelay {
	return &inputRelay{ctx: ctx, w: w, src: src, stop: make(chan struct{}), done: make(chan struct{})}
}

// finished reports whether run has returned.
func (in *inputRelay) finished() bool {
	select {
	case <-in.done:
		return true
	default:
		return false
	}
}

// run copies until the Reader ends, the guest closes its end, or abort. It
// then closes the host end so the guest sees end of file.
//
// A Reader that blocks forever keeps run alive; it is not waited for.
func (in *inputRelay) run() {
	defer close(in.done)
	defer in.w.DecRef(in.ctx)
	if in.src == nil {
		return
	}
	pooled := relayBuffers.Get().(*[relayBufferSize]byte)
	defer relayBuffers.Put(pooled)
	buf := pooled[:]
	for {
		n, err := in.src.Read(buf)
		if n > 0 && !in.write(buf[:n]) {
			return
		}
		if err != nil {
			return // io.EOF or a failing Reader both end the guest's input.
		}
		select {
		case <-in.stop:
			return
		default:
		}
	}
}

// write writes b to the pipe, reporting false if the guest is gone.
func (in *inputRelay) write(b []byte) bool {
	for len(b) > 0 {
		n, err := in.w.Write(in.ctx, usermem.BytesIOSequence(b), vfs.WriteOptions{})
		b = b[n:]
		switch {
		case err == nil:
		case linuxerr.Equals(linuxerr.ErrWouldBlock, err):
			if waitReady(in.w, waiter.WritableEvents, in.stop) != nil {
				return false
			}
		default:
			return false // EPIPE: no guest reader is left.
		}
	}
	return true
}

// abort makes run return at its next wait.
func (in *inputRelay) abort() { in.once.Do(func() { close(in.stop) }) }
