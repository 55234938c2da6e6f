package exetrim

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseMapsKeepsOnlyTheExecutablesReadOnlyMappings(t *testing.T) {
	const maps = `00400000-01283000 r-xp 00000000 fe:00 10152293                           /opt/my exe
01283000-02657000 r--p 00e83000 fe:00 10152293                           /opt/my exe
02657000-026e2000 rw-p 02257000 fe:00 10152293                           /opt/my exe
026e2000-04732000 rw-p 00000000 00:00 0
7f6310796000-7f6310980000 r--s 00000000 fe:00 10282257                   /cache/rootfs.erofs
7f6310980000-7f6310990000 r--p 00000000 fe:00 10282258                   /opt/my exe.so
7ffd1e5f6000-7ffd1e5f8000 r-xp 00000000 00:00 0                          [vdso]
`
	r, err := parseMaps(bufio.NewScanner(strings.NewReader(maps)), "/opt/my exe")
	if err != nil {
		t.Fatal(err)
	}
	want := []span{{0x400000, 0x1283000}, {0x1283000, 0x2657000}}
	if fmt.Sprint(r.spans) != fmt.Sprint(want) {
		t.Fatalf("spans %x, want %x", r.spans, want)
	}
	if _, err := parseMaps(bufio.NewScanner(strings.NewReader("zz r-xp 0 0:0 1 /x\n")), "/x"); err == nil {
		t.Fatal("a malformed range was accepted")
	}
}

// mappedPages counts the pages of r that are in this process's page table,
// from /proc/self/pagemap. Counting faults in no code or data of its own: f
// and buf are set up by the caller and the loop is all syscalls.
func mappedPages(t *testing.T, f *os.File, buf []byte, r *Ranges) int {
	t.Helper()
	n := 0
	for _, s := range r.spans {
		for addr := s.start; addr < s.end; {
			pages := min(int(s.end-addr)/pageSize, len(buf)/8)
			b := buf[:pages*8]
			if _, err := f.ReadAt(b, int64(addr/pageSize*8)); err != nil {
				t.Fatalf("reading pagemap: %v", err)
			}
			for i := 0; i < pages; i++ {
				if b[i*8+7]&0x80 != 0 { // bit 63: present
					n++
				}
			}
			addr += uintptr(pages * pageSize)
		}
	}
	return n
}

const pageSize = 4096

// sink keeps the writes below from being optimised away.
var sink = make([]byte, 1<<20)

func TestTrimUnmapsReadOnlyPagesOnly(t *testing.T) {
	r, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() == 0 {
		t.Fatal("found no read-only mappings of the test binary")
	}
	for i := range sink {
		sink[i] = byte(i)
	}
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer pagemap.Close()
	buf := make([]byte, 64<<10)
	// No collection between the trim and the count: it would map back the
	// function tables of every goroutine's stack.
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	// Map all of them first.
	for _, s := range r.spans {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, s.start, s.end-s.start, unix.MADV_POPULATE_READ); errno != 0 {
			t.Fatalf("MADV_POPULATE_READ: %v", errno)
		}
	}
	before := mappedPages(t, pagemap, buf, r)
	if err := r.Trim(); err != nil {
		t.Fatal(err)
	}
	after := mappedPages(t, pagemap, buf, r)
	t.Logf("read-only pages of the executable mapped: %d before the trim, %d after", before, after)
	// All were mapped before. The runtime and the counting loop fault some
	// back in at once, 64 KiB around each fault, which in a binary as small
	// as this test is 40% of it.
	if before*pageSize != int(r.Len()) || after*3 > before*2 {
		t.Errorf("trim left %d of %d pages mapped", after, before)
	}
	// The process goes on working, and what it wrote is intact.
	for i := range sink {
		if sink[i] != byte(i) {
			t.Fatalf("sink[%d] = %d after the trim", i, sink[i])
		}
	}
}

func TestTrimmerWaitsForQuiet(t *testing.T) {
	var mu sync.Mutex
	trimmed := make(chan struct{}, 16)
	tr := newTrimmer(20*time.Millisecond, func() {
		mu.Lock()
		defer mu.Unlock()
		trimmed <- struct{}{}
	})
	defer tr.Stop()
	// The first trim follows start-up.
	select {
	case <-trimmed:
	case <-time.After(10 * time.Second):
		t.Fatal("no trim after start-up")
	}
	// None while a request is in flight, however long it takes.
	end := tr.Track()
	select {
	case <-trimmed:
		t.Fatal("trimmed while a request was in flight")
	case <-time.After(200 * time.Millisecond):
	}
	end()
	end() // idempotent
	select {
	case <-trimmed:
	case <-time.After(10 * time.Second):
		t.Fatal("no trim after the request ended")
	}
	if n := tr.Trims(); n != 2 {
		t.Fatalf("%d trims, want 2", n)
	}
	// Nothing after Stop.
	tr.Track()()
	tr.Stop()
	select {
	case <-trimmed:
		t.Fatal("trimmed after Stop")
	case <-time.After(200 * time.Millisecond):
	}
}
