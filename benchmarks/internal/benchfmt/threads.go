package benchfmt

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Threads describes what every thread of the given processes is doing, as
// counts of (process name, state, kernel wait channel, system call number)
// — e.g. "12× rungv-stub S futex_wait_queue 202" — so that a stalled
// exec's log tells a task that waits for a wake-up (sleeping stubs, a
// sentry thread in futex) from one starved of CPU (runnable threads).
func Threads(pids []int) string {
	counts := map[string]int{}
	for _, pid := range pids {
		tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
		if err != nil {
			continue
		}
		for _, t := range tasks {
			dir := filepath.Join("/proc", strconv.Itoa(pid), "task", t.Name())
			comm, state, ok := commAndState(dir)
			if !ok {
				continue
			}
			counts[fmt.Sprintf("%s %s %s %s", comm, state, readTrim(dir, "wchan"), syscallNumber(dir))]++
		}
	}
	keys := slices.Sorted(maps.Keys(counts))
	slices.SortStableFunc(keys, func(a, b string) int { return counts[b] - counts[a] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d× %s", counts[k], k)
	}
	return strings.Join(parts, "; ")
}

// commAndState reads a task's name and state from its stat file; the name
// is in parentheses and may hold spaces.
func commAndState(dir string) (comm, state string, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return "", "", false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+3 > len(s) {
		return "", "", false
	}
	return s[open+1 : end], s[end+2 : end+3], true
}

func readTrim(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil || len(b) == 0 {
		return "-"
	}
	return strings.TrimSpace(string(b))
}

// syscallNumber is the first field of a task's syscall file: the number
// of the system call it is blocked in, "running", or "-".
func syscallNumber(dir string) string {
	f := strings.Fields(readTrim(dir, "syscall"))
	if len(f) == 0 {
		return "-"
	}
	return f[0]
}

// Tree returns pid and every process below it, from the kernel's lists of
// each thread's children.
func Tree(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(out[i]), "task", "*", "children"))
		for _, t := range tasks {
			b, _ := os.ReadFile(t)
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// CPUTimes are the host's CPU times, summed over its CPUs, in clock ticks.
type CPUTimes struct {
	Busy, Idle, Steal uint64
}

// ReadCPUTimes reads the host's CPU times from /proc/stat; zero if it
// cannot.
func ReadCPUTimes() CPUTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return CPUTimes{}
	}
	var v [8]uint64
	for i := range v {
		v[i], _ = strconv.ParseUint(f[i+1], 10, 64)
	}
	// user nice system idle iowait irq softirq steal
	return CPUTimes{Busy: v[0] + v[1] + v[2] + v[5] + v[6], Idle: v[3] + v[4], Steal: v[7]}
}

// Since describes the CPU time spent between before and c: how much of it
// was busy, idle, and stolen by the hypervisor (a VM whose host ran other
// guests instead: every thread of the VM waited).
func (c CPUTimes) Since(before CPUTimes) string {
	busy, idle, steal := c.Busy-before.Busy, c.Idle-before.Idle, c.Steal-before.Steal
	total := busy + idle + steal
	if total == 0 {
		return "no CPU time read"
	}
	pct := func(x uint64) float64 { return float64(x) * 100 / float64(total) }
	return fmt.Sprintf("%.0f%% busy, %.0f%% idle, %.0f%% stolen", pct(busy), pct(idle), pct(steal))
}

// SchedStat is what the scheduler counted for one thread
// (/proc/PID/task/TID/schedstat): time on a CPU, and time runnable but
// waiting for one.
type SchedStat struct {
	Pid       int
	Comm      string
	Run, Wait time.Duration
}

// ReadSchedStats reads every thread's SchedStat on the host, by thread id.
func ReadSchedStats() map[int]SchedStat {
	out := map[int]SchedStat{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		tasks, _ := os.ReadDir(filepath.Join("/proc", p.Name(), "task"))
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			dir := filepath.Join("/proc", p.Name(), "task", t.Name())
			f := strings.Fields(readTrim(dir, "schedstat"))
			comm, _, ok := commAndState(dir)
			if len(f) < 2 || !ok {
				continue
			}
			run, _ := strconv.ParseInt(f[0], 10, 64)
			wait, _ := strconv.ParseInt(f[1], 10, 64)
			out[tid] = SchedStat{Pid: pid, Comm: comm, Run: time.Duration(run), Wait: time.Duration(wait)}
		}
	}
	return out
}

// SchedSince describes how the host's threads spent the time between
// before and now: the processes in pids (a stalled sandbox's tree) — how
// long their threads ran and how long they waited, runnable, for a CPU —
// and the five process names that ran longest on the host, so a stall
// names what held the CPUs. Threads born since before count from zero.
func SchedSince(before, now map[int]SchedStat, pids []int) string {
	mine := map[int]bool{}
	for _, p := range pids {
		mine[p] = true
	}
	var treeRun, treeWait time.Duration
	type use struct {
		run   time.Duration
		procs map[int]bool
	}
	byComm := map[string]*use{}
	for tid, s := range now {
		b := before[tid]
		if b.Pid != s.Pid {
			b = SchedStat{}
		}
		run, wait := s.Run-b.Run, s.Wait-b.Wait
		if mine[s.Pid] {
			treeRun += run
			treeWait += wait
		}
		u := byComm[s.Comm]
		if u == nil {
			u = &use{procs: map[int]bool{}}
			byComm[s.Comm] = u
		}
		u.run += run
		u.procs[s.Pid] = true
	}
	names := slices.Sorted(maps.Keys(byComm))
	slices.SortStableFunc(names, func(a, b string) int { return int(byComm[b].run - byComm[a].run) })
	top := make([]string, 0, 5)
	for _, n := range names[:min(5, len(names))] {
		top = append(top, fmt.Sprintf("%s (%d processes) %v", n, len(byComm[n].procs), byComm[n].run.Round(time.Millisecond)))
	}
	return fmt.Sprintf("this sandbox's threads ran %v and waited %v for a CPU; the host ran longest: %s",
		treeRun.Round(time.Millisecond), treeWait.Round(time.Millisecond), strings.Join(top, ", "))
}
