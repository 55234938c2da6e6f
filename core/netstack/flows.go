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
	open   map[*flow]struct{}
	wg     sync.WaitGroup
}

// flow is one goroutine run by a flowSet and what it holds open.
type flow struct {
	closers []io.Closer
	done    chan struct{} // closed when the goroutine returns
}

func newFlowSet() *flowSet { return &flowSet{open: map[*flow]struct{}{}} }

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
	fl := &flow{closers: cs, done: make(chan struct{})}
	f.open[fl] = struct{}{}
	f.wg.Add(1)
	f.mu.Unlock()
	go func() {
		defer f.wg.Done()
		defer close(fl.done)
		defer func() {
			f.mu.Lock()
			delete(f.open, fl)
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
	n := 0
	for fl := range f.open {
		n += len(fl.closers)
	}
	return n
}

// closeFlows closes the flows whose closers keep does not keep and waits
// for their goroutines; the set stays open for new flows.
func (f *flowSet) closeFlows(keep func(io.Closer) bool) {
	f.mu.Lock()
	var ending []*flow
	for fl := range f.open {
		if len(fl.closers) == 1 && keep(fl.closers[0]) {
			continue
		}
		ending = append(ending, fl)
	}
	f.mu.Unlock()
	for _, fl := range ending {
		for _, c := range fl.closers {
			c.Close()
		}
	}
	for _, fl := range ending {
		<-fl.done
	}
}

// close closes everything registered and waits for the goroutines.
func (f *flowSet) close() {
	f.mu.Lock()
	f.closed = true
	open := f.open
	f.open = map[*flow]struct{}{}
	f.mu.Unlock()
	for fl := range open {
		for _, c := range fl.closers {
			c.Close()
		}
	}
	f.wg.Wait()
}

// gate holds new relays into the guest while it is shut (a checkpoint is
// being taken), so that no relay waits on a guest socket then.
type gate struct {
	mu   sync.Mutex
	shut chan struct{} // nil while open
}

// wait returns once the gate is open or done is closed.
func (g *gate) wait(done <-chan struct{}) {
	g.mu.Lock()
	c := g.shut
	g.mu.Unlock()
	if c == nil {
		return
	}
	select {
	case <-c:
	case <-done:
	}
}

// close shuts the gate.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut == nil {
		g.shut = make(chan struct{})
	}
}

// open opens the gate, letting the held relays go on.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
}
