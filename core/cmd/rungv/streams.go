package main

import (
	"fmt"
	"os"
	"time"

	"z.gfire.dev/gvx/core/lockdown"
)

// outputPipes stands between init and rungv's stdout or stderr when they
// are regular files (`rungv run … > log`).
//
// Why: the Sentry imports a pipe or a terminal into the guest as a host
// file, which a snapshot can hold and Restore re-binds, but copies a
// regular file through a relay of its own, which a snapshot cannot hold.
// A pipe whose content rungv appends to the file keeps the file's offset
// semantics, as the Sentry's relay did, and keeps init checkpointable.
type outputPipes struct {
	done []chan struct{}
}

// stream returns f, or if f is a regular file, the write end of a pipe
// that a goroutine copies to f. The caller closes the write end once the
// sandbox holds its own copy.
func (o *outputPipes) stream(f *os.File) (*os.File, bool, error) {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return f, false, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, false, fmt.Errorf("a pipe for init's output to %s: %w", f.Name(), err)
	}
	done := make(chan struct{})
	o.done = append(o.done, done)
	go func() {
		defer close(done)
		defer r.Close()
		// The copy runs after lockdown.
		lockdown.Copy(f, r, make([]byte, 64<<10))
	}()
	return w, true, nil
}

// wait waits up to timeout for the copies to reach the end of their pipes,
// which they do once the sandbox has closed its ends.
func (o *outputPipes) wait(timeout time.Duration) {
	deadline := time.After(timeout)
	for _, d := range o.done {
		select {
		case <-d:
		case <-deadline:
			return
		}
	}
}

// initStreams returns init's stdout and stderr and a function that closes
// rungv's copies of the pipes made for them.
func (o *outputPipes) initStreams() (stdout, stderr *os.File, release func(), err error) {
	var opened []*os.File
	release = func() { // idempotent: run calls it once started, and defers it
		for _, f := range opened {
			f.Close()
		}
		opened = nil
	}
	stdout, piped, err := o.stream(os.Stdout)
	if err != nil {
		return nil, nil, release, err
	}
	if piped {
		opened = append(opened, stdout)
	}
	stderr, piped, err = o.stream(os.Stderr)
	if err != nil {
		release()
		return nil, nil, func() {}, err
	}
	if piped {
		opened = append(opened, stderr)
	}
	return stdout, stderr, release, nil
}
