// Package eventually waits, in tests, for something to happen.
//
// A test that sleeps a fixed time for something to happen is wrong both
// ways: on a loaded host the time is too short and the test fails for
// nothing; on a quiet one it is too long and every run pays for it. A test
// here instead polls for the event itself and gives up at a deadline, after
// which it fails saying what did not happen.
package eventually

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// The pause between polls starts short, for events that come at once, and
// doubles up to a bound, so that a long wait does not keep a CPU busy.
const (
	firstPause = time.Millisecond
	maxPause   = 50 * time.Millisecond
)

// Condition reports whether the awaited event has happened and, while it
// has not, may say why in err, which the error after the deadline repeats.
// An err made with Stop ends the wait at once: the event will never come.
type Condition func() (done bool, err error)

// Stop marks err as the reason the awaited event will never come, for a
// Condition to end its wait with.
func Stop(err error) error { return stopped{err} }

// stopped is an error made by Stop.
type stopped struct{ error }

// Unwrap returns the error Stop was given.
func (s stopped) Unwrap() error { return s.error }

// Wait polls cond until it reports done or d passes. It returns nil once
// cond holds; the error cond stops with (see Stop); or, after d, an error
// "after d: what" with cond's last error. what says what was awaited.
func Wait(d time.Duration, what string, cond Condition) error {
	deadline := time.Now().Add(d)
	pause := firstPause
	for {
		done, err := cond()
		var stop stopped
		if errors.As(err, &stop) {
			return fmt.Errorf("%s: %w", what, stop.error)
		}
		if done {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			if err != nil {
				return fmt.Errorf("after %v: %s: %w", d, what, err)
			}
			return fmt.Errorf("after %v: %s", d, what)
		}
		// The last poll falls on the deadline, not a pause past it.
		time.Sleep(min(pause, left))
		pause = min(2*pause, maxPause)
	}
}

// Within is Wait failing t: it returns once cond holds, and otherwise fails
// t with Wait's error. Like t.Fatal, it must be called from the goroutine
// running the test.
func Within(t testing.TB, d time.Duration, what string, cond Condition) {
	t.Helper()
	if err := Wait(d, what, cond); err != nil {
		t.Fatal(err)
	}
}
