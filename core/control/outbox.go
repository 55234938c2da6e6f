package control

import (
	"bytes"
	"encoding/binary"
	"io"
	"sync"
)

// execOutputWindow is how far, in bytes, the sandbox may send an exec's
// output ahead of the exec's writers: the Client's Hello.OutputWindow. It
// is many of the Sentry's relay reads, so that writers that keep up never
// leave the command waiting for credit.
const execOutputWindow = 64 * (64 << 10)

// outbox passes one exec's output to its writers on a goroutine of the
// exec's own, started at its first chunk, and then the exec's response,
// so that the exec's result is returned only once all of its output was
// written.
//
// The connection's reader goroutine, which every request on the
// connection waits on, hands chunks to the outbox and must never wait for
// the writers: a slow writer (a Python callback waiting for the GIL, a
// terminal) would stall every other request on the sandbox. Yet the
// outbox cannot bound its backlog by itself either: once it is full the
// reader could only wait (the stall again) or drop output. So the bound
// comes from the sandbox: the client asks for flow control in its hello,
// and gives window back (StreamCredit) only as the writers take the
// output. The sandbox then sends at most execOutputWindow bytes ahead of
// the writers, and a command whose output is not taken blocks on its
// pipe, as it would writing to a slow reader outside a sandbox; the
// backlog never exceeds the window, and only that exec waits.
//
// A sandbox that does not flow-control (a rungv from before it) is held to
// the same bound the old way: the reader waits while an exec's backlog is
// a window, so memory stays bounded and the connection stalls only behind
// a writer that far behind.
//
// Writers that only keep output in memory (ExecIO.InMemory) are called on
// the reader itself, as they cannot stall it: passing each chunk to
// another goroutine costs more than such a write.
type outbox struct {
	c              *Client
	stdout, stderr io.Writer
	inMemory       bool
	id             uint64       // the exec's request id; set by start
	resp           chan message // the call's; set by start
	// taken counts the cost of what was written and not yet given back
	// as credit; only the goroutine that writes (the delivery goroutine,
	// or the reader for in-memory writers) uses it.
	taken int

	mu   sync.Mutex
	cond sync.Cond // signals chunks, the answer, room and drop
	// chunks are output not yet given to a writer; backlog counts their
	// cost in the window (bytes and FrameCredit each), and the cost of
	// the one being written.
	chunks  []outChunk
	backlog int
	running bool     // the delivery goroutine has started
	answer  *message // the response, once it came, to pass on behind the output
	// answered is set once the response came.
	answered bool
	// dropped is set once the caller stopped waiting: the rest of the
	// output is not written, and the delivery goroutine ends.
	dropped bool
}

type outChunk struct {
	stream uint8
	data   []byte
}

func newOutbox(c *Client, eio ExecIO) *outbox {
	o := &outbox{c: c, stdout: eio.Stdout, stderr: eio.Stderr, inMemory: eio.InMemory}
	if o.stdout == nil {
		o.stdout = io.Discard
	}
	if o.stderr == nil {
		o.stderr = io.Discard
	}
	o.cond.L = &o.mu
	return o
}

// put queues a copy of a chunk of output on stream, or writes it for
// in-memory writers; the reader calls it.
func (o *outbox) put(stream uint8, b []byte) {
	if o.inMemory {
		o.write(outChunk{stream, b})
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	// Under flow control the backlog is within the window, and this does
	// not wait; see outbox.
	cost := len(b) + FrameCredit
	for o.backlog > 0 && o.backlog+cost > execOutputWindow && !o.dropped {
		o.cond.Wait()
	}
	if o.dropped {
		return
	}
	o.chunks = append(o.chunks, outChunk{stream, copyChunk(b)})
	o.backlog += cost
	if !o.running {
		o.running = true
		go o.deliver()
	}
	o.cond.Broadcast()
}

// respond passes the exec's response on behind its output; the reader
// calls it.
func (o *outbox) respond(m message) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.answered = true
	if !o.running {
		// No output came, or the reader wrote it (in-memory writers):
		// nothing to wait for.
		o.resp <- m
		return
	}
	o.answer = &m
	o.cond.Broadcast()
}

// hasAnswer reports whether the exec's response came, to be passed on once
// its output is written.
func (o *outbox) hasAnswer() bool {
	if o == nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.answered
}

// drop stops passing output on: the caller no longer waits for it. The
// delivery goroutine ends once the write under way, if any, returns.
func (o *outbox) drop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dropped = true
	o.chunks = nil
	o.backlog = 0
	o.cond.Broadcast()
}

// deliver writes the output in order, then passes the response on.
func (o *outbox) deliver() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for {
		for len(o.chunks) == 0 && o.answer == nil && !o.dropped {
			o.cond.Wait()
		}
		switch {
		case o.dropped:
			return
		case len(o.chunks) == 0:
			o.resp <- *o.answer
			return
		}
		ch := o.chunks[0]
		o.chunks[0] = outChunk{}
		o.chunks = o.chunks[1:]
		o.mu.Unlock()
		o.write(ch)
		recycleChunk(ch.data)
		o.mu.Lock()
		if !o.dropped {
			o.backlog -= len(ch.data) + FrameCredit
		}
		o.cond.Broadcast()
	}
}

// write passes a chunk to its writer and gives its window back, a quarter
// window at a time, so that an exec with little output sends no credit
// frame at all.
func (o *outbox) write(ch outChunk) {
	w := o.stdout
	if ch.stream == StreamStderr {
		w = o.stderr
	}
	w.Write(ch.data)
	o.taken += len(ch.data) + FrameCredit
	if o.taken >= execOutputWindow/4 {
		o.c.credit(o.id, o.taken)
		o.taken = 0
	}
}

// pooledChunk is the size of the buffers that outboxes reuse for their
// copies of output: the Sentry's relay reads, which a command writing
// much output fills.
const pooledChunk = 64 << 10

// chunkPool holds buffers of pooledChunk bytes: copying large chunks of
// output into new memory each time cost more than the rest of their way
// through the protocol.
var chunkPool = sync.Pool{New: func() any { return new([pooledChunk]byte) }}

// copyChunk copies b, into a pooled buffer if b fills more than half of
// one, so that a buffer never holds more than twice what is counted
// against the window.
func copyChunk(b []byte) []byte {
	if len(b) <= pooledChunk/2 || len(b) > pooledChunk {
		return bytes.Clone(b)
	}
	return append(chunkPool.Get().(*[pooledChunk]byte)[:0], b...)
}

// recycleChunk returns a copy made by copyChunk to the pool, if it came
// from there.
func recycleChunk(b []byte) {
	if cap(b) == pooledChunk && len(b) > pooledChunk/2 {
		chunkPool.Put((*[pooledChunk]byte)(b[:pooledChunk]))
	}
}

// credit gives an exec's sandbox n of its output window back.
func (c *Client) credit(id uint64, n int) {
	if c.welcome.OutputWindow == 0 {
		return
	}
	var b [binary.MaxVarintLen64]byte
	c.fw.writeData(id, StreamCredit, 0, b[:binary.PutUvarint(b[:], uint64(n))])
}

// stopOutput tells an exec's sandbox that the client takes no more of its
// output.
func (c *Client) stopOutput(id uint64) {
	if c.welcome.OutputWindow == 0 {
		return
	}
	c.fw.writeData(id, StreamCredit, FlagEOF, nil)
}
