package main

import (
	"context"
	"errors"
	"io"
	"sync"
)

// errQueueClosed is what reading a closed queue returns.
var errQueueClosed = errors.New("the output queue is closed")

// outputQueue holds a stream's output until its C caller reads it. A
// write waits while the queue is full, so that a caller that stops
// reading holds up the command as a full pipe would, and not libgvx's
// memory.
type outputQueue struct {
	mu      sync.Mutex
	buf     []byte
	limit   int
	ended   bool          // the command's output is complete
	closed  bool          // the handle is gone: drop writes, fail reads
	changed chan struct{} // closed and replaced on every change
}

var _ io.Writer = (*outputQueue)(nil)

func newOutputQueue(limit int) *outputQueue {
	return &outputQueue{limit: limit, changed: make(chan struct{})}
}

// notify wakes the waiters. Preconditions: q.mu is held.
func (q *outputQueue) notify() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// Write implements io.Writer.
func (q *outputQueue) Write(p []byte) (int, error) {
	n := len(p)
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(p) > 0 {
		for len(q.buf) >= q.limit && !q.closed {
			wait := q.changed
			q.mu.Unlock()
			<-wait
			q.mu.Lock()
		}
		if q.closed {
			return n, nil
		}
		k := min(len(p), q.limit-len(q.buf))
		q.buf = append(q.buf, p[:k]...)
		p = p[k:]
		q.notify()
	}
	return n, nil
}

// read copies what the queue holds into b, waiting for some if it is
// empty: 0 and nil at the end of the output, errQueueClosed once closed,
// ctx's error if it ends first.
func (q *outputQueue) read(ctx context.Context, b []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.buf) == 0 && !q.ended && !q.closed {
		wait := q.changed
		q.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			q.mu.Lock()
			return 0, ctx.Err()
		}
		q.mu.Lock()
	}
	if q.closed {
		return 0, errQueueClosed
	}
	n := copy(b, q.buf)
	q.buf = q.buf[n:]
	if len(q.buf) == 0 {
		q.buf = nil
	}
	q.notify()
	return n, nil
}

// finish marks the end of the output.
func (q *outputQueue) finish() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ended = true
	q.notify()
}

// close drops what the queue holds and wakes every waiter.
func (q *outputQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.buf = nil
	q.notify()
}
