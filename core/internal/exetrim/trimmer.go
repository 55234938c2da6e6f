package exetrim

import (
	"sync"
	"time"
)

// Trimmer trims once the process has been quiet for a while: no tracked
// request in flight, and none ended for the quiet period. A burst of requests
// maps back what it uses; the trim after it gives that back again, so an idle
// process maps only what idling touches.
//
// A request costs two lock round trips and a clock read; the one timer is
// set again only by the first request to end after a trim.
type Trimmer struct {
	quiet time.Duration
	trim  func()
	timer *time.Timer // runs check; set once

	mu       sync.Mutex
	inFlight int
	lastEnd  time.Time // when the last request ended, or the Trimmer began
	// pending is whether the timer is set to look at the quiet period; it
	// is false from a trim until the next request ends.
	pending bool
	stopped bool
	trims   int
}

// TrimWhenQuiet returns a Trimmer that trims r after each quiet period,
// starting with one from now.
func (r *Ranges) TrimWhenQuiet(quiet time.Duration) *Trimmer {
	return newTrimmer(quiet, func() { r.Trim() })
}

func newTrimmer(quiet time.Duration, trim func()) *Trimmer {
	t := &Trimmer{quiet: quiet, trim: trim, lastEnd: time.Now(), pending: true}
	// check locks t.mu first, so it cannot see the timer unset.
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timer = time.AfterFunc(quiet, t.check)
	return t
}

// Track marks the start of a request; the returned function marks its end.
// Track and the function it returns may be called from any goroutine.
func (t *Trimmer) Track() (end func()) {
	t.mu.Lock()
	t.inFlight++
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.inFlight--
			t.lastEnd = time.Now()
			if !t.pending && !t.stopped {
				t.pending = true
				t.timer.Reset(t.quiet)
			}
		})
	}
}

// check trims if the quiet period has passed, or looks again when it will
// have. A request in flight leaves the timer unset: its end sets it.
func (t *Trimmer) check() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	if t.inFlight > 0 {
		t.pending = false
		return
	}
	if wait := t.quiet - time.Since(t.lastEnd); wait > 0 {
		t.timer.Reset(wait)
		return
	}
	t.trim()
	t.trims++
	t.pending = false
}

// Trims is how many times the Trimmer has trimmed.
func (t *Trimmer) Trims() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.trims
}

// Stop ends trimming; a trim in progress completes first.
func (t *Trimmer) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	t.timer.Stop()
}
