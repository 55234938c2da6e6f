package exetrim

import (
	"sync"
	"time"
)

// Trimmer trims once the process has been quiet for a while: no tracked
// request in flight, and none begun or ended for the quiet period. A burst of
// requests maps back what it uses; the trim after it gives that back again,
// so an idle process maps only what idling touches.
type Trimmer struct {
	quiet time.Duration
	trim  func()

	mu       sync.Mutex
	inFlight int
	timer    *time.Timer
	// armed counts armings of the timer, so a timer that fired just as a
	// request began or ended does not trim early.
	armed   uint64
	stopped bool
	trims   int
}

// TrimWhenQuiet returns a Trimmer that trims r after each quiet period,
// starting with one from now.
func (r *Ranges) TrimWhenQuiet(quiet time.Duration) *Trimmer {
	return newTrimmer(quiet, func() { r.Trim() })
}

func newTrimmer(quiet time.Duration, trim func()) *Trimmer {
	t := &Trimmer{quiet: quiet, trim: trim}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.arm()
	return t
}

// arm starts the quiet period afresh.
//
// Preconditions: t.mu is locked.
func (t *Trimmer) arm() {
	if t.timer != nil {
		t.timer.Stop()
	}
	t.armed++
	armed := t.armed
	t.timer = time.AfterFunc(t.quiet, func() { t.fire(armed) })
}

// Track marks the start of a request; the returned function marks its end.
// Track and the function it returns may be called from any goroutine.
func (t *Trimmer) Track() (end func()) {
	t.mu.Lock()
	t.inFlight++
	t.armed++ // whatever timer is pending is void now
	t.timer.Stop()
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.inFlight--
			if t.inFlight == 0 && !t.stopped {
				t.arm()
			}
		})
	}
}

func (t *Trimmer) fire(armed uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// A request may have begun, or ended and re-armed the timer, between
	// the timer firing and the lock.
	if armed != t.armed || t.inFlight > 0 || t.stopped {
		return
	}
	t.trim()
	t.trims++
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
