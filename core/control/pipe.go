package control

import (
	"io"
	"sync"
)

// streamPipe carries a byte stream from a connection's reader goroutine to
// its consumer. Writes never block — the connection must keep flowing for
// the other requests on it — so the buffer holds what the consumer has not
// read yet; the peer decides how much that is.
type streamPipe struct {
	mu     sync.Mutex
	cond   sync.Cond
	chunks [][]byte
	err    error // io.EOF after the last chunk, or the failure
	closed bool  // the consumer is gone: drop writes
}

func newStreamPipe() *streamPipe {
	p := &streamPipe{}
	p.cond.L = &p.mu
	return p
}

// write appends a copy of b.
func (p *streamPipe) write(b []byte) {
	if len(b) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.err != nil {
		return
	}
	p.chunks = append(p.chunks, append([]byte(nil), b...))
	p.cond.Signal()
}

// finish ends the stream with err (io.EOF for a normal end).
func (p *streamPipe) finish(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
	p.cond.Broadcast()
}

// Read implements io.Reader.
func (p *streamPipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.chunks) == 0 && p.err == nil && !p.closed {
		p.cond.Wait()
	}
	if len(p.chunks) == 0 {
		if p.closed {
			return 0, io.ErrClosedPipe
		}
		return 0, p.err
	}
	n := copy(b, p.chunks[0])
	if n == len(p.chunks[0]) {
		p.chunks[0] = nil
		p.chunks = p.chunks[1:]
	} else {
		p.chunks[0] = p.chunks[0][n:]
	}
	return n, nil
}

// Close implements io.Closer: the consumer stops reading.
func (p *streamPipe) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.chunks = nil
	p.cond.Broadcast()
	return nil
}

var _ io.ReadCloser = (*streamPipe)(nil)
