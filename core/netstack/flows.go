package netstack

import (
	"io"
	"sync"
)

// flowSet tracks what is open on behalf of the guest (relayed
// connections, UDP flows, listeners) so Close can end it all.
type flowSet struct {
	mu     sync.Mutex
	closed bool
	open   map[io.Closer]struct{}
	wg     sync.WaitGroup
}

func newFlowSet() *flowSet { return &flowSet{open: map[io.Closer]struct{}{}} }

// run runs fn in a goroutine with cs registered; they are closed if the
// set closes first, and unregistered when fn returns. It reports false,
// closing cs, if the set is already closed.
func (f *flowSet) run(fn func(), cs ...io.Closer) bool {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		f.open[c] = struct{}{}
	}
	f.wg.Add(1)
	f.mu.Unlock()
	go func() {
		defer f.wg.Done()
		defer func() {
			f.mu.Lock()
			for _, c := range cs {
				delete(f.open, c)
			}
			f.mu.Unlock()
		}()
		fn()
	}()
	return true
}

// count returns how many closers are registered.
func (f *flowSet) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.open)
}

// close closes everything registered and waits for the goroutines.
func (f *flowSet) close() {
	f.mu.Lock()
	f.closed = true
	open := f.open
	f.open = map[io.Closer]struct{}{}
	f.mu.Unlock()
	for c := range open {
		c.Close()
	}
	f.wg.Wait()
}
