// Package hoststate records what a sandbox must never change on the host —
// interfaces, addresses, routes, firewall rules, cgroups and mounts — so
// tests can prove a sandbox left it alone.
package hoststate

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// State maps an aspect of the host ("ip route", "mounts", …) to how it
// looked.
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

// Snapshot records the host's state now.
func Snapshot(logf func(format string, args ...any)) (State, error) {
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
	return state, nil
}

// Diff describes each aspect that differs in after, with the lines only
// before (-) and only after (+); nil when nothing differs.
func (s State) Diff(after State) []string {
	var diffs []string
	for k, v := range s {
		if after[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s changed:\n%s", k, lineDiff(v, after[k])))
		}
	}
	sort.Strings(diffs)
	return diffs
}

// Unchanged runs workload between two snapshots, up to tries times, and
// returns nil as soon as one run left the host as it was. Other work on the
// machine (other test packages, host containers) can change the host
// meanwhile, so only a change seen in every try is returned.
func Unchanged(tries int, snapshot func() State, workload func(), logf func(format string, args ...any)) []string {
	var diffs []string
	for try := 1; try <= tries; try++ {
		before := snapshot()
		workload()
		if diffs = before.Diff(snapshot()); diffs == nil {
			return nil
		}
		logf("try %d: the host changed:\n%s", try, strings.Join(diffs, "\n"))
	}
	return diffs
}

// lineDiff lists the lines only in a (-) and only in b (+).
func lineDiff(a, b string) string {
	count := map[string]int{}
	for _, l := range strings.Split(a, "\n") {
		count[l]--
	}
	for _, l := range strings.Split(b, "\n") {
		count[l]++
	}
	var out []string
	for l, n := range count {
		switch {
		case n < 0:
			out = append(out, "- "+l)
		case n > 0:
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
