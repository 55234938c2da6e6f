package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// counterScript counts in its own memory and says each step on stdout.
const counterScript = `i=0; while :; do i=$((i+1)); echo "tick $i"; sleep 0.02; done`

// TestCheckpointAndRestore runs a counter with its output going to a
// regular file, snapshots it twice through `rungv checkpoint` (once
// running on, once stopping), and continues it with `rungv run
// --restore`: the restored counter goes on from the count it had, into
// the new rungv's output.
func TestCheckpointAndRestore(t *testing.T) {
	img := testImage(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "box.sock")
	log1 := filepath.Join(dir, "first.log")
	out, err := os.Create(log1)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(rungvBinary, "--cache", sharedCache(t), "run", "--control", "unix:"+sock, img, "sh", "-c", counterScript)
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitTicks(t, log1, 5)

	running := filepath.Join(dir, "running.snap")
	if _, errOut, code := runCLI(t, "", "checkpoint", "--control", "unix:"+sock, "-o", running); code != 0 {
		t.Fatalf("checkpoint: exit %d: %s", code, errOut)
	}
	// It runs on; the snapshot's count lies between 5 and before.
	before := waitTicks(t, log1, lastTick(t, log1)+3)
	stopped := filepath.Join(dir, "stopped.snap")
	if _, errOut, code := runCLI(t, "", "checkpoint", "--control", "unix:"+sock, "--stop", "-o", stopped); code != 0 {
		t.Fatalf("checkpoint --stop: exit %d: %s", code, errOut)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rungv after checkpoint --stop: %v; want exit 0 (%s)", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "checkpointed; the sandbox stopped") {
		t.Errorf("rungv's stderr after checkpoint --stop: %q", stderr.String())
	}
	last := lastTick(t, log1)
	if last < before {
		t.Fatalf("the log ends at tick %d, before %d", last, before)
	}

	for _, snap := range []struct {
		path     string
		from, to int
	}{{running, 5, before}, {stopped, last, last}} {
		log2 := filepath.Join(dir, filepath.Base(snap.path)+".log")
		out2, err := os.Create(log2)
		if err != nil {
			t.Fatal(err)
		}
		r := exec.Command(rungvBinary, "--cache", sharedCache(t), "run", "-q", "--restore", snap.path, img)
		var rerr strings.Builder
		r.Stdout, r.Stderr = out2, &rerr
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		first := waitFirstTick(t, log2, &rerr)
		r.Process.Kill()
		r.Wait()
		out2.Close()
		if first < snap.from || first > snap.to+1 {
			t.Errorf("%s: the restored counter starts at tick %d; want the saved count, %d to %d (or the next)", filepath.Base(snap.path), first, snap.from, snap.to)
		}
	}

	// --restore continues the snapshot's init: a command is refused.
	if _, errOut, code := runCLI(t, "", "run", "-q", "--restore", stopped, img, "echo", "hi"); code == 0 || !strings.Contains(errOut, "give no COMMAND") {
		t.Errorf("--restore with a command: exit %d, %q", code, errOut)
	}
	// A file that is no snapshot.
	if _, errOut, code := runCLI(t, "", "run", "-q", "--restore", log1, img); code == 0 || !strings.Contains(errOut, "not a gvx sandbox snapshot") {
		t.Errorf("--restore of a log file: exit %d, %q", code, errOut)
	}
}

// TestCheckpointNATNeedsStop: a NAT sandbox that would run on is refused
// with a message that says to stop it; stopping works and restores.
func TestCheckpointNATNeedsStop(t *testing.T) {
	img := testImage(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "nat.sock")
	cmd, stderr, c := startControlled(t, sock, "--network", "nat", img)
	defer cmd.Process.Kill()
	c.Close()
	snap := filepath.Join(dir, "nat.snap")
	if _, errOut, code := runCLI(t, "", "checkpoint", "--control", "unix:"+sock, "-o", snap); code == 0 || !strings.Contains(errOut, "only be checkpointed with --stop") {
		t.Fatalf("checkpoint of a NAT sandbox running on: exit %d, %q", code, errOut)
	}
	if _, err := os.Stat(snap); !os.IsNotExist(err) {
		t.Errorf("a refused checkpoint left %s: %v", snap, err)
	}
	if _, errOut, code := runCLI(t, "", "checkpoint", "--control", "unix:"+sock, "--stop", "-o", snap); code != 0 {
		t.Fatalf("checkpoint --stop of a NAT sandbox: exit %d, %q", code, errOut)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rungv after checkpoint --stop: %v (%s)", err, stderr.String())
	}
	out, errOut, code := runCLI(t, "", "run", "-q", "--network", "nat", "--timeout", "2s", "--restore", snap, img)
	if code != 0 && !strings.Contains(errOut, "--timeout") {
		t.Fatalf("restoring the NAT snapshot: exit %d, %q %q", code, out, errOut)
	}
}

func ticks(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var n []int
	for _, line := range strings.Split(string(b), "\n") {
		if v, err := strconv.Atoi(strings.TrimPrefix(line, "tick ")); err == nil && strings.HasPrefix(line, "tick ") {
			n = append(n, v)
		}
	}
	return n
}

func lastTick(t *testing.T, path string) int {
	t.Helper()
	n := ticks(t, path)
	if len(n) == 0 {
		return 0
	}
	return n[len(n)-1]
}

// waitTicks waits until path's last tick is at least n and returns it.
func waitTicks(t *testing.T, path string, n int) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if last := lastTick(t, path); last >= n {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has not reached tick %d", path, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitFirstTick(t *testing.T, path string, stderr *strings.Builder) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if n := ticks(t, path); len(n) > 0 {
			return n[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restored sandbox wrote nothing to %s (stderr %q)", path, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
