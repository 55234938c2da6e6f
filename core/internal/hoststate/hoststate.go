// Package hoststate records what a sandbox must never change on the host —
// interfaces, addresses, routes, firewall rules, cgroups, mounts, processes,
// listening sockets, files, kernel modules, keyrings, swap, sysctls and the
// clock — so tests can prove a sandbox left it alone.
package hoststate

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// State maps an aspect of the host ("ip route", "mounts", …) to how it
// looked: lines, each "KEY" or "KEY\tDETAIL". A change is reported by key,
// so that Unchanged can tell a change a workload makes every time from the
// passing noise of other work on the machine.
type State map[string]string

// commands print the network aspects. A missing tool or a failing command
// leaves its aspect out, reported through logf.
var commands = map[string][]string{
	"ip addr":        {"ip", "addr"},
	"ip route":       {"ip", "route"},
	"ip -6 route":    {"ip", "-6", "route"},
	"iptables-save":  {"iptables-save"},
	"ip6tables-save": {"ip6tables-save"},
	"nft ruleset":    {"nft", "list", "ruleset"},
}

// Snapshot records the host's state now. Files and unix sockets under the
// exclude paths — the caller's own temporary directories and caches — are
// left out.
func Snapshot(logf func(format string, args ...any), exclude ...string) (State, error) {
	state := State{}
	for name, argv := range commands {
		path, err := exec.LookPath(argv[0])
		if err != nil {
			logf("not comparing %s: %s is not installed", name, argv[0])
			continue
		}
		out, err := exec.Command(path, argv[1:]...).CombinedOutput()
		if err != nil {
			logf("not comparing %s: %v %s", name, err, out)
			continue
		}
		var keep []string
		for _, l := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(l, "#") { // iptables-save's dated comments
				keep = append(keep, l)
			}
		}
		state[name] = strings.Join(keep, "\n")
	}
	var cgroups []string
	filepath.WalkDir("/sys/fs/cgroup", func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Count(path, "/") > 6 {
			return filepath.SkipDir
		}
		cgroups = append(cgroups, path)
		return nil
	})
	state["cgroup tree"] = strings.Join(cgroups, "\n")
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	state["mounts"] = string(mounts)
	ex := excluder(exclude)
	for name, read := range map[string]func() (string, error){
		"processes":         processes,
		"listening sockets": func() (string, error) { return listeners(ex) },
		"files":             func() (string, error) { return files(ex) },
		"kernel modules":    modules,
		"keys":              keys,
		"swaps":             swaps,
		"sysctls":           sysctls,
		"clock":             clockOffset,
	} {
		v, err := read()
		if err != nil {
			logf("not comparing %s: %v", name, err)
			continue
		}
		state[name] = v
	}
	return state, nil
}

// Busy are the aspects that anything else running on the host changes
// too — other tests' files, processes and listeners (go test runs packages
// at once) — so a test can prove a sandbox left them alone only with a quiet
// window to compare against, as the escape battery does.
var Busy = []string{"files", "processes", "listening sockets"}

// WithoutBusy returns s without the Busy aspects, for tests that compare the
// host's network, mounts, cgroups and kernel state while other tests run.
func (s State) WithoutBusy() State {
	out := State{}
	for k, v := range s {
		if !slices.Contains(Busy, k) {
			out[k] = v
		}
	}
	return out
}

// Change is one line of an aspect that is only before (Sign '-') or only
// after ('+').
type Change struct {
	Aspect string
	Sign   byte
	Key    string
	Line   string
}

func (c Change) String() string {
	return fmt.Sprintf("%c %s", c.Sign, strings.ReplaceAll(c.Line, "\t", "  "))
}

// id names what changed, for comparing tries.
func (c Change) id() string { return c.Aspect + "\x00" + c.Key }

// Changes lists what differs in after, aspect by aspect.
func (s State) Changes(after State) []Change {
	var out []Change
	for aspect, v := range s {
		w, ok := after[aspect]
		if !ok || w == v {
			continue
		}
		if aspect == "clock" {
			if c, moved := clockMoved(v, w); moved {
				out = append(out, c)
			}
			continue
		}
		out = append(out, lineDiff(aspect, v, w)...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Aspect != out[j].Aspect {
			return out[i].Aspect < out[j].Aspect
		}
		return out[i].Line < out[j].Line
	})
	return out
}

// Diff describes each aspect that differs in after, with the lines only
// before (-) and only after (+); nil when nothing differs.
func (s State) Diff(after State) []string {
	return Format(s.Changes(after))
}

// Format describes changes aspect by aspect.
func Format(changes []Change) []string {
	var diffs []string
	for i := 0; i < len(changes); {
		j := i
		var b strings.Builder
		fmt.Fprintf(&b, "%s changed:", changes[i].Aspect)
		for ; j < len(changes) && changes[j].Aspect == changes[i].Aspect; j++ {
			b.WriteString("\n" + changes[j].String())
		}
		diffs = append(diffs, b.String())
		i = j
	}
	return diffs
}

// Persistent keeps the changes of last whose aspect and key changed in
// every one of tries too. A workload's effect shows in each try; other
// work on the machine rarely changes the same thing each time.
func Persistent(last []Change, tries ...[]Change) []Change {
	var out []Change
	for _, c := range last {
		every := true
		for _, try := range tries {
			found := false
			for _, d := range try {
				if d.id() == c.id() {
					found = true
					break
				}
			}
			if !found {
				every = false
				break
			}
		}
		if every {
			out = append(out, c)
		}
	}
	return out
}

// Without drops the changes whose aspect and key changed in noise too:
// what the machine changes by itself, seen while the workload did not run.
func Without(changes, noise []Change) []Change {
	drop := map[string]bool{}
	for _, c := range noise {
		drop[c.id()] = true
	}
	var out []Change
	for _, c := range changes {
		if !drop[c.id()] {
			out = append(out, c)
		}
	}
	return out
}

// Unchanged runs workload between two snapshots, up to tries times, and
// returns nil as soon as one run left the host as it was. Other work on the
// machine (other test packages, host containers) can change the host
// meanwhile, so only a change — an aspect's key — seen in every try is
// returned.
func Unchanged(tries int, snapshot func() State, workload func(), logf func(format string, args ...any)) []string {
	var seen [][]Change
	for try := 1; try <= tries; try++ {
		before := snapshot()
		workload()
		changes := before.Changes(snapshot())
		if changes = Persistent(changes, seen...); changes == nil {
			return nil
		}
		logf("try %d: the host changed:\n%s", try, strings.Join(Format(changes), "\n"))
		seen = append(seen, changes)
	}
	return Format(seen[len(seen)-1])
}

// lineDiff lists the lines only in a (-) and only in b (+).
func lineDiff(aspect, a, b string) []Change {
	count := map[string]int{}
	for _, l := range strings.Split(a, "\n") {
		count[l]--
	}
	for _, l := range strings.Split(b, "\n") {
		count[l]++
	}
	var out []Change
	for l, n := range count {
		key, _, _ := strings.Cut(l, "\t")
		switch {
		case n < 0:
			out = append(out, Change{Aspect: aspect, Sign: '-', Key: key, Line: l})
		case n > 0:
			out = append(out, Change{Aspect: aspect, Sign: '+', Key: key, Line: l})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

// excluder reports whether path is one of prefixes or below one.
func excluder(prefixes []string) func(path string) bool {
	var clean []string
	for _, p := range prefixes {
		if abs, err := filepath.Abs(p); err == nil {
			clean = append(clean, abs)
		}
		// The same directory by its resolved name (/tmp may be a link).
		if real, err := filepath.EvalSymlinks(p); err == nil {
			clean = append(clean, real)
		}
	}
	return func(path string) bool {
		for _, p := range clean {
			if path == p || strings.HasPrefix(path, p+"/") {
				return true
			}
		}
		return false
	}
}
