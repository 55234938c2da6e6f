package control

import (
	"math"
	"sync"
)

// outputWindow is what a flow-controlled client can still take of one
// exec's output (see the package comment): the exec's stdout and stderr
// writers take from it before each frame they send, and wait while it is
// empty, so that the command blocks on its pipe instead of the connection
// or the client filling up.
type outputWindow struct {
	mu     sync.Mutex
	cond   sync.Cond
	credit uint64
	// closed is set once the client takes no more of the output: it
	// stopped waiting for the exec, or went away. Writers then drop
	// output instead of waiting for credit that will not come.
	closed bool
}

func newOutputWindow(size int) *outputWindow {
	w := &outputWindow{credit: uint64(size)}
	w.cond.L = &w.mu
	return w
}

// take waits until the window has room for a frame and takes room for one
// of up to want bytes (and MaxData), FrameCredit included. It returns the
// frame's size, or false once the window is closed.
func (w *outputWindow) take(want int) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.credit <= FrameCredit && !w.closed {
		w.cond.Wait()
	}
	if w.closed {
		return 0, false
	}
	n := min(uint64(want), MaxData, w.credit-FrameCredit)
	w.credit -= n + FrameCredit
	return int(n), true
}

// grant gives back n bytes of credit.
func (w *outputWindow) grant(n uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n > math.MaxUint64-w.credit {
		n = math.MaxUint64 - w.credit
	}
	w.credit += n
	w.cond.Broadcast()
}

// close releases the writers for good; what they are given from then on
// is dropped.
func (w *outputWindow) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	w.cond.Broadcast()
}
