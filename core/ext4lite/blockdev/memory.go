package blockdev

import "sync"

// Memory is a Device held in memory, for tests and fuzzing.
type Memory struct {
	mu   sync.RWMutex
	data []byte
	// Syncs counts Sync calls.
	Syncs int
}

var _ Device = (*Memory)(nil)
var _ Discarder = (*Memory)(nil)

// NewMemory returns a zeroed device of size bytes.
func NewMemory(size int64) *Memory {
	return &Memory{data: make([]byte, size)}
}

// NewMemoryFrom returns a device holding a copy of image.
func NewMemoryFrom(image []byte) *Memory {
	return &Memory{data: append([]byte(nil), image...)}
}

// Bytes returns a copy of the device contents.
func (m *Memory) Bytes() []byte {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return append([]byte(nil), m.data...)
}

// ReadAt implements io.ReaderAt.
func (m *Memory) ReadAt(p []byte, off int64) (int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := checkRange(off, len(p), int64(len(m.data))); err != nil {
		return 0, err
	}
	return copy(p, m.data[off:]), nil
}

// WriteAt implements io.WriterAt.
func (m *Memory) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := checkRange(off, len(p), int64(len(m.data))); err != nil {
		return 0, err
	}
	return copy(m.data[off:], p), nil
}

// Sync implements Device.Sync.
func (m *Memory) Sync() error {
	m.mu.Lock()
	m.Syncs++
	m.mu.Unlock()
	return nil
}

// Size implements Device.Size.
func (m *Memory) Size() int64 { return int64(len(m.data)) }

// Close implements Device.Close.
func (m *Memory) Close() error { return nil }

// Discard implements Discarder by zeroing the range.
func (m *Memory) Discard(off, length int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := checkRange(off, int(length), int64(len(m.data))); err != nil {
		return err
	}
	clear(m.data[off : off+length])
	return nil
}

var _ Zeroer = (*Memory)(nil)

// ZeroRange implements Zeroer.
func (m *Memory) ZeroRange(off, length int64) error { return m.Discard(off, length) }
