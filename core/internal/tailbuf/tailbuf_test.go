package tailbuf

import (
	"fmt"
	"strings"
	"testing"
)

// goroutineDump is a long tail of a crash report: many goroutines' stacks.
func goroutineDump(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "goroutine %d [select]:\nruntime.gopark(0x1)\n\t/go/src/runtime/proc.go:460 +0xce\n\n", 100+i)
	}
	return b.String()
}

// writeInChunks writes s in pieces of k bytes, as a pipe may deliver it.
func writeInChunks(b *Buffer, s string, k int) {
	for len(s) > 0 {
		n := min(k, len(s))
		b.Write([]byte(s[:n]))
		s = s[n:]
	}
}

func TestKeepsTheLastBytes(t *testing.T) {
	b := &Buffer{Max: 10}
	writeInChunks(b, "hello, world\nand more\n", 3)
	if got := b.String(); got != "\nand more\n" {
		t.Fatalf("String() = %q, want the last 10 bytes", got)
	}
	if head, more := b.Crash(); head != "" || more != 0 {
		t.Fatalf("no crash written, Crash() = %q, %d", head, more)
	}
}

// TestKeepsTheHeadOfACrash: a panic's headline and the crashing goroutine's
// stack survive a report far longer than Max; the runtime's explanation
// lines before a fatal error are part of it; unrelated lines before are not.
func TestKeepsTheHeadOfACrash(t *testing.T) {
	for _, tc := range []struct {
		name, report, want string
	}{{
		name:   "panic",
		report: "rungv: booting\npanic: Unknown syscall 56 error: createSysmsgThread: failed to get clone\n\ngoroutine 38 [running]:\nkernel.ExtractErrno()\n\t/x/task_syscall.go:498 +0x1e5\n\n",
		want:   "panic: Unknown syscall 56 error: createSysmsgThread: failed to get clone\n\ngoroutine 38 [running]:\nkernel.ExtractErrno()\n\t/x/task_syscall.go:498 +0x1e5",
	}, {
		name:   "fatal error",
		report: "some line\nruntime: failed to create new OS thread (have 8 already; errno=11)\nruntime: may need to increase max user processes (ulimit -u)\nfatal error: newosproc\n\nruntime stack:\nruntime.throw()\n\n",
		want:   "runtime: failed to create new OS thread (have 8 already; errno=11)\nruntime: may need to increase max user processes (ulimit -u)\nfatal error: newosproc\n\nruntime stack:\nruntime.throw()",
	}, {
		name:   "fatal signal",
		report: "rungv: booting\nSIGABRT: abort\nPC=0x492e81 m=0 sigcode=0\n\ngoroutine 0 gp=0x2733a80 m=0 mp=0x2735ea0 [idle]:\nruntime.futex()\n\n",
		want:   "SIGABRT: abort\nPC=0x492e81 m=0 sigcode=0\n\ngoroutine 0 gp=0x2733a80 m=0 mp=0x2735ea0 [idle]:\nruntime.futex()",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Buffer{Max: 1 << 10}
			writeInChunks(b, tc.report+goroutineDump(2000), 7)
			head, more := b.Crash()
			if head != tc.want {
				t.Errorf("Crash() head = %q, want %q", head, tc.want)
			}
			if more < 2000*3 {
				t.Errorf("Crash() says %d more lines, want at least %d", more, 2000*3)
			}
			if s := b.String(); len(s) != 1<<10 || !strings.HasSuffix(s, "proc.go:460 +0xce\n\n") {
				t.Errorf("String() holds %d bytes ending %q, want the last 1 KiB", len(s), s[max(0, len(s)-30):])
			}
		})
	}
}

// TestCrashHeadIsBounded: a headline followed by a stack without blank
// lines keeps at most crashHeadMax bytes.
func TestCrashHeadIsBounded(t *testing.T) {
	b := &Buffer{Max: 1 << 10}
	b.Write([]byte("panic: boom\n" + strings.Repeat("frame\n", 10000)))
	head, more := b.Crash()
	if !strings.HasPrefix(head, "panic: boom\n") || len(head) > crashHeadMax || more == 0 {
		t.Fatalf("Crash() = %d bytes starting %q, %d more lines", len(head), head[:min(len(head), 20)], more)
	}
}
