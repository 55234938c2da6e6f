package escapeprobe

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/hoststate"
	"z.gfire.dev/gvx/core/internal/proctree"
	"z.gfire.dev/gvx/core/internal/testimage"
	"z.gfire.dev/gvx/internal/battery"
)

// Battery runs probes and judges the host.
type Battery struct {
	// Probes run in order.
	Probes []Probe
	// PerProbe compares the host after every probe, not every group.
	PerProbe bool
	// Timeout is each probe's deadline.
	Timeout time.Duration
	// Host holds the targets.
	Host *Host
	// Exclude names the caller's own paths: its temporary directories and
	// caches. The caches every test shares (the test images', gvx's
	// default) are left out always.
	Exclude []string
	// Command returns the command that runs script as guest root; Run
	// starts it. Its process tree is watched: nothing of it may outlive it.
	Command func(script string) *exec.Cmd
	// Tries bounds the runs when the host changed: a change is an effect
	// only if every try shows it (other work on the machine changes the
	// host too, but seldom the same thing each time).
	Tries int
	Logf  func(format string, args ...any)
}

// Report is a battery's outcome.
type Report struct {
	// Runs counts the script's runs (tries and rounds).
	Runs int
	// Tried counts probes run, over all runs.
	Tried int
	// Effects are the host changes every try showed, and each target
	// reached, each with the probe group after which it was seen.
	Effects []string
	// Hangs are probes that did not end by themselves in time, or a
	// run that did not end.
	Hangs []string
	// Panics are Go panics or traces in the runner's output.
	Panics []string
	// Failures are runs that went wrong otherwise (a probe ended the
	// sandbox, the runner failed).
	Failures []string
}

// Run runs the battery once, trying again while the host changed.
func (b *Battery) Run() Report {
	var rep Report
	probes := b.Probes
	if b.PerProbe {
		probes = append([]Probe(nil), probes...)
		for i := range probes {
			probes[i].Group = probes[i].Name
		}
	}
	script := Script(probes, int(b.Timeout/time.Second), true)
	var tries [][]hoststate.Change
	where := map[string]string{}
	for try := 1; try <= max(b.Tries, 1); try++ {
		start := time.Now()
		changes, bad := b.once(script, &rep, where)
		rep.Effects = append(rep.Effects, bad...) // targets reached count at once
		if changes = hoststate.Persistent(changes, tries...); len(changes) == 0 {
			return rep
		}
		// What changes as much while no sandbox runs is the machine's
		// own (a log another program appends to).
		quiet := b.snapshot()
		time.Sleep(time.Since(start))
		changes = hoststate.Without(changes, quiet.Changes(b.snapshot()))
		if len(changes) == 0 {
			return rep
		}
		b.Logf("try %d: the host changed:\n%s", try, head(strings.Join(hoststate.Format(changes), "\n"), 40))
		tries = append(tries, changes)
	}
	seen := map[string]bool{}
	for _, c := range tries[len(tries)-1] {
		e := fmt.Sprintf("after %s: %s: %s", where[c.Aspect+"\x00"+c.Key], c.Aspect, c)
		if !seen[e] {
			seen[e] = true
			rep.Effects = append(rep.Effects, e)
		}
	}
	return rep
}

func (b *Battery) snapshot() hoststate.State {
	exclude := append(ownOutput(), b.Exclude...)
	exclude = append(exclude, testimage.CacheRoot())
	if home, err := os.UserHomeDir(); err == nil {
		exclude = append(exclude, filepath.Join(home, ".cache", "gvx"))
	}
	s, err := hoststate.Snapshot(b.Logf, exclude...)
	if err != nil {
		b.Logf("host snapshot: %v", err)
	}
	return s
}

// once runs the script once and returns the host's changes, group by
// group and after the run, and the targets reached.
func (b *Battery) once(script string, rep *Report, where map[string]string) ([]hoststate.Change, []string) {
	rep.Runs++
	snapshot := b.snapshot
	first := snapshot()
	prev := first
	var changes []hoststate.Change
	watch := newWatch()
	cmd := b.Command(script)
	var pid int
	res, err := Run(cmd, b.Timeout+30*time.Second, func(group string) {
		if pid == 0 && cmd.Process != nil {
			pid = cmd.Process.Pid
		}
		watch.sample(pid)
		now := snapshot()
		for _, c := range prev.Changes(now) {
			changes = append(changes, c)
			where[c.Aspect+"\x00"+c.Key] = group
		}
		prev = now
	})
	rep.Tried += res.Tried
	b.Logf("run %d, the guest's output:\n%s", rep.Runs, res.Output)
	for _, h := range res.Hung {
		rep.Hangs = append(rep.Hangs, "probe "+h)
	}
	if res.Panic != "" {
		rep.Panics = append(rep.Panics, res.Panic)
	}
	if err != nil {
		rep.Failures = append(rep.Failures, fmt.Sprintf("run %d: %v\n%s", rep.Runs, err, tail(res.Output+res.Stderr, 20)))
	}
	for name, status := range res.Status {
		if status == -1 && name != "reboot" {
			rep.Failures = append(rep.Failures, fmt.Sprintf("run %d: the sandbox ended during probe %s\n%s", rep.Runs, name, tail(res.Stderr, 20)))
		}
	}
	if !res.Done && res.Status["reboot"] != -1 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("run %d: the script did not finish\n%s", rep.Runs, tail(res.Output+res.Stderr, 20)))
	}
	bad := b.Host.Check(res.Output)
	// A stub of a sandbox that has exited is gone soon after it, not at
	// once: wait for that.
	var survivors []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if survivors = watch.survivors(); len(survivors) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, s := range survivors {
		bad = append(bad, "outlived its sandbox: "+s)
	}
	for _, c := range first.Changes(snapshot()) {
		if _, ok := where[c.Aspect+"\x00"+c.Key]; !ok {
			where[c.Aspect+"\x00"+c.Key] = "the run"
		}
		changes = append(changes, c)
	}
	return changes, bad
}

// ownOutput lists the files the caller and its ancestors write their
// output to (go test's log redirected to a file grows as the test logs).
func ownOutput() []string {
	var out []string
	for pid := os.Getpid(); pid > 1; {
		for _, fd := range []string{"1", "2"} {
			if p, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd)); err == nil && strings.HasPrefix(p, "/") {
				out = append(out, p)
			}
		}
		f := statFields(pid)
		if f == nil {
			break
		}
		pid, _ = strconv.Atoi(f[1])
	}
	return out
}

// watch remembers a process tree's processes (by pid and start time) and
// sessions (systrap's stubs have their own) while it runs.
type watch struct {
	procs    map[int]string
	sessions map[string]bool
}

func newWatch() *watch { return &watch{procs: map[int]string{}, sessions: map[string]bool{}} }

func (w *watch) sample(pid int) {
	if pid == 0 {
		return
	}
	for _, p := range append(proctree.Descendants(pid), pid) {
		if f := statFields(p); f != nil {
			w.procs[p] = f[19]
			w.sessions[f[3]] = true
		}
	}
}

// survivors lists the processes of the tree, or of its sessions, that
// still run.
func (w *watch) survivors() []string {
	entries, _ := os.ReadDir("/proc")
	var own string // the caller's session, which the tree's root shares
	if f := statFields(os.Getpid()); f != nil {
		own = f[3]
	}
	var out []string
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := statFields(p)
		if f == nil {
			continue
		}
		if w.procs[p] == f[19] || (w.sessions[f[3]] && f[3] != own && f[3] != "0") {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			out = append(out, fmt.Sprintf("pid %d %s", p, strings.ReplaceAll(string(cmdline), "\x00", " ")))
		}
	}
	return out
}

// statFields are /proc/pid/stat's fields after the command name: state,
// ppid, pgrp, session, … (index 19 is the start time).
func statFields(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return nil
	}
	return f
}

func head(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n… %d lines more", len(lines)-n)
	}
	return s
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Add counts other's runs in r.
func (r *Report) Add(other Report) {
	r.Runs += other.Runs
	r.Tried += other.Tried
	r.Effects = append(r.Effects, other.Effects...)
	r.Hangs = append(r.Hangs, other.Hangs...)
	r.Panics = append(r.Panics, other.Panics...)
	r.Failures = append(r.Failures, other.Failures...)
}

// Judge writes r's figures as a battery table and fails t for any host
// effect, hang, panic or failure.
func (r Report) Judge(t testing.TB, title string, took time.Duration) {
	t.Helper()
	battery.Table(t, title, []string{"probes tried", "runs", "host effects", "hangs", "panics", "time"},
		[]string{fmt.Sprint(r.Tried), fmt.Sprint(r.Runs), fmt.Sprint(len(r.Effects)), fmt.Sprint(len(r.Hangs)),
			fmt.Sprint(len(r.Panics)), took.Round(time.Second).String()})
	for _, l := range []struct {
		what string
		list []string
	}{{"HOST EFFECT", r.Effects}, {"hang", r.Hangs}, {"panic", r.Panics}, {"failure", r.Failures}} {
		for _, s := range l.list {
			t.Errorf("%s: %s", l.what, s)
		}
	}
	if r.Tried == 0 {
		t.Error("no probe ran")
	}
}

// PanicIn returns the first line of a Go panic or fatal error in a
// program's output, or "".
func PanicIn(output string) string { return panicLine.FindString(output) }
