package control

import (
	"encoding/json"
	"io"
	"sync"
)

// frameWriter serializes frames onto a connection: a frame is written whole
// by one goroutine at a time.
type frameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	err error // the first write error; every later write returns it
}

func (fw *frameWriter) writeJSON(v any) error {
	b, err := encodeJSON(v)
	if err != nil {
		return err
	}
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.writeLocked(b)
}

func (fw *frameWriter) writeLocked(b []byte) error {
	if fw.err != nil {
		return fw.err
	}
	if _, err := fw.w.Write(b); err != nil {
		fw.err = err
	}
	return fw.err
}

// writeData sends data as frames of at most MaxData bytes; flags go on the
// last one. An empty data with FlagEOF sends one empty frame.
func (fw *frameWriter) writeData(id uint64, stream, flags uint8, data []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	for {
		n := min(len(data), MaxData)
		f := uint8(0)
		if n == len(data) {
			f = flags
		}
		fw.buf = encodeData(fw.buf[:0], id, stream, f, data[:n])
		if err := fw.writeLocked(fw.buf); err != nil {
			return err
		}
		data = data[n:]
		if len(data) == 0 {
			return nil
		}
	}
}

// streamWriter is an io.Writer that sends what it is given as data frames.
type streamWriter struct {
	fw     *frameWriter
	id     uint64
	stream uint8
	// win, if set, is the flow-controlled window of an exec's output:
	// Write sends only as much as the client can take, waiting for more.
	win *outputWindow
}

// Write implements io.Writer.
func (s *streamWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if s.win == nil {
		if err := s.fw.writeData(s.id, s.stream, 0, p); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	for sent := 0; sent < len(p); {
		n, ok := s.win.take(len(p) - sent)
		if !ok {
			// The client takes no more of this output.
			return len(p), nil
		}
		if err := s.fw.writeData(s.id, s.stream, 0, p[sent:sent+n]); err != nil {
			return sent, err
		}
		sent += n
	}
	return len(p), nil
}

func (s *streamWriter) eof() error {
	return s.fw.writeData(s.id, s.stream, FlagEOF, nil)
}

var _ io.Writer = (*streamWriter)(nil)

func decodeParams(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return Errorf(CodeInvalid, "malformed parameters: %v", err)
	}
	return nil
}
