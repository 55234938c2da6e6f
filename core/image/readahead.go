package image

import (
	"context"
	"io"
	"sync"
)

const (
	readaheadChunk = 1 << 20
	readaheadDepth = 4
)

// readahead runs a producer (decompression) in its own goroutine, a few
// chunks ahead of the consumer (tar parsing and writing), so the two use
// two cores.
type readahead struct {
	chunks  chan chunk
	free    chan []byte
	stop    chan struct{}
	done    sync.WaitGroup
	cur     []byte // unread part of buf
	buf     []byte // the chunk being consumed, returned to free when empty
	err     error
	closeMu sync.Once
}

type chunk struct {
	b   []byte
	err error
}

// newReadahead starts open in a new goroutine and streams what the reader
// it returns yields. release is called when the producer ends.
func newReadahead(ctx context.Context, open func() (r io.Reader, release func() error, err error)) *readahead {
	ra := &readahead{
		chunks: make(chan chunk, readaheadDepth),
		free:   make(chan []byte, readaheadDepth+1),
		stop:   make(chan struct{}),
	}
	for range readaheadDepth + 1 {
		ra.free <- make([]byte, readaheadChunk)
	}
	ra.done.Add(1)
	go ra.produce(ctx, open)
	return ra
}

func (ra *readahead) produce(ctx context.Context, open func() (io.Reader, func() error, error)) {
	defer ra.done.Done()
	send := func(c chunk) bool {
		select {
		case ra.chunks <- c:
			return true
		case <-ra.stop:
			return false
		case <-ctx.Done():
			select {
			case ra.chunks <- chunk{err: ctx.Err()}:
			case <-ra.stop:
			}
			return false
		}
	}
	r, release, err := open()
	if err != nil {
		send(chunk{err: err})
		return
	}
	defer release()
	for {
		var buf []byte
		select {
		case buf = <-ra.free:
		case <-ra.stop:
			return
		}
		n, err := io.ReadFull(r, buf)
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		if n > 0 && !send(chunk{b: buf[:n]}) {
			return
		}
		if err != nil {
			send(chunk{err: err})
			return
		}
	}
}

// Read implements io.Reader.
func (ra *readahead) Read(p []byte) (int, error) {
	for len(ra.cur) == 0 {
		if ra.err != nil {
			return 0, ra.err
		}
		c := <-ra.chunks
		if c.err != nil {
			ra.err = c.err
			continue
		}
		ra.cur, ra.buf = c.b, c.b[:cap(c.b)]
	}
	n := copy(p, ra.cur)
	ra.cur = ra.cur[n:]
	if len(ra.cur) == 0 {
		ra.free <- ra.buf
		ra.buf = nil
	}
	return n, nil
}

// Close stops the producer and waits for it.
func (ra *readahead) Close() error {
	ra.closeMu.Do(func() { close(ra.stop) })
	ra.done.Wait()
	return nil
}
