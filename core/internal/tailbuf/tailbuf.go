// Package tailbuf keeps the last bytes a child process writes to stderr, so
// that an error about the child can say what it said last.
package tailbuf

import (
	"io"
	"sync"
)

// Buffer keeps the last Max bytes written to it. It is safe for concurrent
// use; os/exec writes a child's stderr from its own goroutine.
type Buffer struct {
	Max int

	mu  sync.Mutex
	buf []byte
}

var _ io.Writer = (*Buffer)(nil)

// Write implements io.Writer.
func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.Max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns what the buffer holds.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
