// Package tailbuf keeps the last bytes a child process writes to stderr, so
// that an error about the child can say what it said last — and, when the
// child is a Go program that crashed, what the crash report said first.
package tailbuf

import (
	"bytes"
	"io"
	"sync"
)

// crashHeadMax bounds the kept head of a crash report: its headline and
// the stack of the goroutine that crashed.
const crashHeadMax = 8 << 10

// crashContextLines is how many "runtime: " lines just before a crash's
// headline belong to it (the Go runtime explains a fatal error in them).
const crashContextLines = 4

// Buffer keeps the last Max bytes written to it. It also keeps the head of
// a Go crash report ("panic: …", "fatal error: …" or "SIGABRT: …", up to
// the end of the first stack in it), which the report's own tail, every
// other goroutine's stack, would push out of the last Max bytes. It is safe
// for concurrent use; os/exec writes a child's stderr from its own
// goroutine.
type Buffer struct {
	Max int

	mu  sync.Mutex
	buf []byte

	// line is the unfinished last line.
	line []byte
	// runtimeLines are the latest "runtime: " lines, before a crash.
	runtimeLines [][]byte
	// crash is the crash report's head; crashDone once it is complete.
	crash     []byte
	crashDone bool
	// crashLines counts the report's lines after crash's head.
	crashLines int
	blankLines int
}

var _ io.Writer = (*Buffer)(nil)

// Write implements io.Writer.
func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.Max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(t.line) < crashHeadMax {
				t.line = append(t.line, p...)
			}
			break
		}
		t.line = append(t.line, p[:i+1]...)
		t.endLine(t.line)
		t.line = t.line[:0]
		p = p[i+1:]
	}
	return n, nil
}

// endLine takes in one complete line (with its newline).
//
// Preconditions: t.mu is held.
func (t *Buffer) endLine(l []byte) {
	switch {
	case t.crash == nil && isCrashHeadline(l):
		for _, r := range t.runtimeLines {
			t.crash = append(t.crash, r...)
		}
		t.crash = append(t.crash, l...)
	case t.crash == nil && bytes.HasPrefix(l, []byte("runtime: ")):
		if len(t.runtimeLines) == crashContextLines {
			t.runtimeLines = t.runtimeLines[1:]
		}
		t.runtimeLines = append(t.runtimeLines, bytes.Clone(l))
	case t.crash == nil:
		t.runtimeLines = t.runtimeLines[:0]
	case t.crashDone:
		t.crashLines++
	case len(t.crash)+len(l) > crashHeadMax:
		t.crashDone = true
		t.crashLines++
	default:
		// The headline, a blank line, the first stack, a blank line: the
		// second blank line ends the head.
		if len(bytes.TrimSpace(l)) == 0 {
			t.blankLines++
			if t.blankLines == 2 {
				t.crashDone = true
				return
			}
		}
		t.crash = append(t.crash, l...)
	}
}

// isCrashHeadline reports whether l starts a Go crash report: a panic, a
// fatal error, or a fatal signal outside Go code ("SIGABRT: abort", which
// the runtime follows with "PC=…").
func isCrashHeadline(l []byte) bool {
	if bytes.HasPrefix(l, []byte("panic: ")) || bytes.HasPrefix(l, []byte("fatal error: ")) {
		return true
	}
	name, _, ok := bytes.Cut(l, []byte(": "))
	if !ok || len(name) < 4 || !bytes.HasPrefix(name, []byte("SIG")) {
		return false
	}
	for _, c := range name[3:] {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// String returns the last Max bytes written.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// Crash returns the head of the first Go crash report written, the
// "runtime: " lines just before its headline included, and how many lines of
// the report follow that head; "" and 0 when nothing crashed.
func (t *Buffer) Crash() (head string, moreLines int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimRight(t.crash, "\n")), t.crashLines
}
