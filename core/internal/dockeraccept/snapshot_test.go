package dockeraccept

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/eventually"
)

// TestSnapshotEpisodes: a ready dockerd on a clone of the golden volume is
// checkpointed (stopping it) and its volume flattened; episodes restored
// from the snapshot, each on its own clone of that volume, answer at once, run containers on
// the default bridge and on a user-defined network (the snapshot hook
// re-made docker0 and the iptables rules), and see nothing of each other.
func TestSnapshotEpisodes(t *testing.T) {
	requireVolumes(t)
	dir := t.TempDir()
	readyVol := cloneGolden(t)
	seedBox := startBox(t, boxOptions{volume: readyVol})
	snap := filepath.Join(dir, "ready.snap")
	if out, err := exec.Command(env.rungv, "checkpoint", "--control", "unix:"+seedBox.control, "--stop", "-o", snap).CombinedOutput(); err != nil {
		t.Fatalf("rungv checkpoint --stop: %v\n%s", err, out)
	}
	select {
	case <-seedBox.done:
		if seedBox.err != nil {
			t.Fatalf("rungv after checkpoint --stop: %v\n%s", seedBox.err, logTail(seedBox.log.String(), 20))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("rungv did not exit after checkpoint --stop")
	}
	// The checkpointed volume is a clone (a delta over the golden); the
	// snapshot's own golden is a whole image, which episodes clone.
	snapVol := filepath.Join(dir, "ready.ext4")
	if out, err := exec.Command(env.rungv, "volume", "flatten", readyVol, snapVol).CombinedOutput(); err != nil {
		t.Fatalf("rungv volume flatten: %v\n%s", err, out)
	}
	if err := checkImage(snapVol); err != nil {
		t.Fatalf("the volume of the checkpointed sandbox: %v", err)
	}

	episode := func(name string) *box {
		vol := filepath.Join(dir, name+".ext4")
		if out, err := exec.Command(env.rungv, "volume", "clone", snapVol, vol).CombinedOutput(); err != nil {
			t.Fatalf("rungv volume clone: %v\n%s", err, out)
		}
		start := time.Now()
		b := startBox(t, boxOptions{volume: vol, restore: snap})
		t.Logf("%s: restored dockerd answered after %v", name, time.Since(start))
		return b
	}

	ep1 := episode("ep1")
	out := ep1.docker(t, "images", "--format", "{{.Repository}}:{{.Tag}}")
	for _, img := range seedImages {
		if !strings.Contains(out, img) {
			t.Fatalf("a restored episode's dockerd lists %q, without %s", out, img)
		}
	}
	if out := ep1.docker(t, "run", "--rm", "busybox", "sh", "-c", "ip -4 -o addr show eth0 | grep -c 172.17."); strings.TrimSpace(out) != "1" {
		t.Errorf("a container on the default bridge after restore: %q", out)
	}
	ep1.docker(t, "network", "create", "ep1net")
	ep1.docker(t, "run", "-d", "--name", "srv", "--network", "ep1net", "busybox", "sh", "-c", "echo served > /tmp/i; httpd -f -p 80 -h /tmp")
	eventually.Within(t, 30*time.Second, "a container to reach another by name on a user-defined network after restore", func() (bool, error) {
		o, _, err := ep1.tryDocker("run", "--rm", "--network", "ep1net", "busybox", "wget", "-qO-", "http://srv/i")
		return err == nil && o == "served\n", fmt.Errorf("wget: %q %v", o, err)
	})
	ep1.docker(t, "create", "--name", "ep1-created", "busybox", "true")

	ep2 := episode("ep2")
	if out := ep2.docker(t, "ps", "-a", "--format", "{{.Names}}"); strings.TrimSpace(out) != "" {
		t.Errorf("episode 2 sees containers: %q", out)
	}
	if out := ep2.docker(t, "run", "--rm", "busybox", "echo", "ep2"); out != "ep2\n" {
		t.Errorf("episode 2 docker run: %q", out)
	}
	if err := ep2.stop(60 * time.Second); err != nil {
		t.Fatalf("stopping episode 2: %v\n%s", err, logTail(ep2.log.String(), 20))
	}
	if err := checkVolume(filepath.Join(dir, "ep2.ext4")); err != nil {
		t.Errorf("episode 2's volume after SIGINT: %v", err)
	}
	if _, err := os.Stat(snap); err != nil {
		t.Errorf("the snapshot is gone: %v", err)
	}
}
