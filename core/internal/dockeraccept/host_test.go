package dockeraccept

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestHostUnchanged: a dockerd creating a bridge, veths, NAT rules, cgroups
// and overlay mounts inside a sandbox leaves no trace on the host: no
// interface, route, iptables or nft rule, mount or cgroup appears.
func TestHostUnchanged(t *testing.T) {
	requireSuite(t)
	// Other work on this machine (other test packages, host containers)
	// can change the host while the sandbox runs; only a difference seen
	// in every one of three tries counts.
	var diffs []string
	for try := 0; try < 3; try++ {
		before := hostState(t)
		dockerWorkout(t)
		after := hostState(t)
		diffs = diffs[:0]
		for k, v := range before {
			if after[k] != v {
				diffs = append(diffs, fmt.Sprintf("%s changed:\n%s", k, lineDiff(v, after[k])))
			}
		}
		if len(diffs) == 0 {
			return
		}
		t.Logf("try %d: the host changed; trying again:\n%s", try+1, strings.Join(diffs, "\n"))
	}
	t.Fatalf("Docker in a sandbox changed the host:\n%s", strings.Join(diffs, "\n"))
}

// dockerWorkout runs an episode that makes dockerd touch everything a host
// dockerd would: a user bridge network, a published port, a privileged
// container mounting, overlay2 mounts, cgroups.
func dockerWorkout(t *testing.T) {
	t.Helper()
	port := freePort(t)
	b := newEpisode(t, "-p", fmt.Sprintf("127.0.0.1:%d:8080", port))
	b.docker(t, "network", "create", "workout")
	b.docker(t, "run", "-d", "--network", "workout", "-p", "8080:80", "--memory", "64m", "busybox",
		"sh", "-c", "mkdir /www && echo workout > /www/index.html && exec httpd -f -p 80 -h /www")
	if got := httpGetRetry(t, fmt.Sprintf("http://127.0.0.1:%d/", port), 20*time.Second); got != "workout\n" {
		t.Fatalf("published container port from the host: %q", got)
	}
	b.docker(t, "run", "--rm", "--privileged", "busybox", "sh", "-c", "mkdir /m && mount -t tmpfs x /m && ip link add gvxdummy type dummy 2>/dev/null; true")
	if err := b.stop(60 * time.Second); err != nil {
		t.Fatalf("stopping the sandbox: %v", err)
	}
}

// hostState is what a sandbox must not change on the host.
func hostState(t *testing.T) map[string]string {
	t.Helper()
	state := map[string]string{}
	for name, argv := range map[string][]string{
		"ip addr":        {"ip", "addr"},
		"ip route":       {"ip", "route"},
		"ip -6 route":    {"ip", "-6", "route"},
		"iptables-save":  {"iptables-save"},
		"ip6tables-save": {"ip6tables-save"},
		"nft ruleset":    {"nft", "list", "ruleset"},
	} {
		path, err := exec.LookPath(argv[0])
		if err != nil {
			t.Logf("not comparing %s: %s is not installed", name, argv[0])
			continue
		}
		out, err := exec.Command(path, argv[1:]...).CombinedOutput()
		if err != nil {
			t.Logf("not comparing %s: %v %s", name, err, out)
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
		t.Fatal(err)
	}
	state["mounts"] = string(mounts)
	return state
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
