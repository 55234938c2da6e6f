package benchfmt

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct {
		p    int
		want time.Duration
	}{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {1, 1}} {
		if got := Percentile(ds, c.p); got != c.want {
			t.Errorf("p%d of 1..10 = %v, want %v", c.p, got, c.want)
		}
	}
	if ds[0] != 5 {
		t.Error("Percentile sorted its argument")
	}
	if Percentile(nil, 50) != 0 {
		t.Error("p50 of nothing is not 0")
	}
}

func TestThreadsDescribesThisProcess(t *testing.T) {
	got := Threads([]int{os.Getpid()})
	// The test binary's own name, with a state and a count.
	name := filepath.Base(os.Args[0])
	if len(name) > 15 {
		name = name[:15] // the kernel's comm is 15 bytes
	}
	if !strings.Contains(got, "× "+name+" ") {
		t.Fatalf("Threads of this process = %q; want counts of %q's threads", got, name)
	}
	if Threads([]int{-1}) != "" {
		t.Fatal("Threads of no process is not empty")
	}
}

func TestCPUTimesAdvance(t *testing.T) {
	before := ReadCPUTimes()
	if before.Busy+before.Idle == 0 {
		t.Fatal("no CPU times read from /proc/stat")
	}
	for deadline := time.Now().Add(10 * time.Second); ReadCPUTimes() == before; {
		if time.Now().After(deadline) {
			t.Fatal("the host's CPU times did not advance in 10 s")
		}
		runtime.Gosched()
	}
	if got := ReadCPUTimes().Since(before); !strings.Contains(got, "% busy") {
		t.Fatalf("Since = %q", got)
	}
}

func TestSchedSinceCountsThisProcessRunning(t *testing.T) {
	before := ReadSchedStats()
	if len(before) == 0 {
		t.Fatal("no thread's schedstat read")
	}
	// Runs on a CPU until the scheduler has counted 50 ms of it.
	var now map[int]SchedStat
	for deadline := time.Now().Add(10 * time.Second); ; {
		now = ReadSchedStats()
		var run time.Duration
		for tid, s := range now {
			if s.Pid == os.Getpid() {
				run += s.Run - before[tid].Run
			}
		}
		if run >= 50*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("this process ran %v in 10 s by its schedstat", run)
		}
	}
	got := SchedSince(before, now, []int{os.Getpid()})
	if strings.HasPrefix(got, "this sandbox's threads ran 0s") || !strings.Contains(got, "the host ran longest: ") {
		t.Fatalf("SchedSince = %q; want this process's run time and the host's top processes", got)
	}
	t.Log(got)
}
