package dockeraccept

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/hoststate"
)

// TestHostUnchanged: a dockerd creating a bridge, veths, NAT rules, cgroups
// and overlay mounts inside a sandbox leaves no trace on the host: no
// interface, route, iptables or nft rule, mount or cgroup appears.
func TestHostUnchanged(t *testing.T) {
	requireSuite(t)
	if diffs := hoststate.Unchanged(3, func() hoststate.State { return hostState(t) }, func() { dockerWorkout(t) }, t.Logf); diffs != nil {
		t.Fatalf("Docker in a sandbox changed the host:\n%s", strings.Join(diffs, "\n"))
	}
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
func hostState(t *testing.T) hoststate.State {
	t.Helper()
	// Its own directories and caches change; nothing else may.
	state, err := hoststate.Snapshot(t.Logf, env.tmp, env.cache)
	if err != nil {
		t.Fatal(err)
	}
	// Other test packages run at once; their files and processes are not ours.
	state = state.WithoutBusy()
	return state
}
