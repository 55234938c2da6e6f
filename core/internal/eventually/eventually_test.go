package eventually

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeT records Fatal instead of ending the test, so that a test can check
// that Within fails.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatal(args ...any) { f.failed = fmt.Sprint(args...) }

func TestWithinReturnsOnceTheEventHappens(t *testing.T) {
	polls := 0
	f := &fakeT{TB: t}
	Within(f, time.Minute, "the third poll", func() (bool, error) {
		polls++
		return polls == 3, fmt.Errorf("poll %d", polls)
	})
	if f.failed != "" || polls != 3 {
		t.Fatalf("Within failed with %q after %d polls, want success after 3", f.failed, polls)
	}
}

func TestWithinFailsAtTheDeadline(t *testing.T) {
	const d = 100 * time.Millisecond
	f := &fakeT{TB: t}
	start := time.Now()
	Within(f, d, "the counter to reach 5", func() (bool, error) {
		return false, errors.New("it is 4")
	})
	took := time.Since(start)
	if want := "after 100ms: the counter to reach 5: it is 4"; f.failed != want {
		t.Errorf("Within failed with %q, want %q", f.failed, want)
	}
	// Not before the deadline; and not a long pause past it, though a
	// loaded host may take a while to wake the test.
	if took < d || took > d+5*time.Second {
		t.Errorf("Within gave up after %v, want about %v", took, d)
	}
	f = &fakeT{TB: t}
	Within(f, time.Millisecond, "a file to appear", func() (bool, error) { return false, nil })
	if want := "after 1ms: a file to appear"; f.failed != want {
		t.Errorf("Within failed with %q, want %q", f.failed, want)
	}
}

func TestWaitEndsEarlyWhenTheEventCannotHappen(t *testing.T) {
	exited := errors.New("the process exited")
	start := time.Now()
	err := Wait(time.Hour, "the server to answer", func() (bool, error) { return false, Stop(exited) })
	if !errors.Is(err, exited) || !strings.HasPrefix(err.Error(), "the server to answer: ") {
		t.Errorf("Wait returned %v, want the condition's error", err)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("Wait took %v for a condition that gave up at once", took)
	}
}
