package gvx

import (
	"fmt"
	"io"
)

// captureBuffer keeps a command's output up to a limit: the first half and
// the last half of the limit, with a marker for what was left out between
// them. A compiler's first error and a test run's last lines both survive;
// a command that prints forever cannot exhaust the caller's memory.
type captureBuffer struct {
	limit   int // 0: keep everything
	head    []byte
	tail    []byte // ring of the last limit/2 bytes once head is full
	tailPos int
	dropped int64
}

var _ io.Writer = (*captureBuffer)(nil)

// Write implements io.Writer.
func (c *captureBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if c.limit <= 0 {
		c.head = append(c.head, p...)
		return n, nil
	}
	headMax := c.limit - c.limit/2
	if room := headMax - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	tailMax := c.limit / 2
	for _, b := range p {
		if len(c.tail) < tailMax {
			c.tail = append(c.tail, b)
			continue
		}
		if tailMax == 0 {
			c.dropped++
			continue
		}
		c.tail[c.tailPos] = b
		c.tailPos = (c.tailPos + 1) % tailMax
		c.dropped++
	}
	return n, nil
}

// Bytes returns what was kept, with a marker where output was dropped.
func (c *captureBuffer) Bytes() []byte {
	if c.dropped == 0 {
		return append(c.head, c.tail...)
	}
	out := append([]byte(nil), c.head...)
	out = append(out, fmt.Sprintf("\n[… %d bytes of output left out …]\n", c.dropped)...)
	out = append(out, c.tail[c.tailPos:]...)
	return append(out, c.tail[:c.tailPos]...)
}

// Truncated reports whether output was dropped.
func (c *captureBuffer) Truncated() bool { return c.dropped > 0 }
