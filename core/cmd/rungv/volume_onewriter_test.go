package main

// A volume has one writer at a time; a FIFO or device is refused, unopened.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/ext4lite"
	"z.gfire.dev/gvx/core/ext4lite/blockdev"
)

// startHolding starts a sandbox that mounts the given volumes and waits
// until its guest runs; it is killed (SIGKILL) at the end of the test.
func startHolding(t *testing.T, img string, mounts ...string) *exec.Cmd {
	t.Helper()
	args := []string{"--cache", sharedCache(t), "run", "-q"}
	for _, m := range mounts {
		args = append(args, "--mount", m)
	}
	cmd := exec.Command(rungvBinary, append(args, img, "sh", "-c", "echo ready; exec sleep 600")...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the holding sandbox did not start: %q %s", line, stderr.String())
	}
	return cmd
}

// TestRunVolumeOneWriter: a volume file has one writer or any number of
// readers, within a sandbox and across sandboxes; a refusal names the
// holder. Clones of one golden run side by side, and the golden cannot be
// written while they do. The lock goes when its holder is killed.
func TestRunVolumeOneWriter(t *testing.T) {
	img := testImage(t)
	dir := t.TempDir()
	vol := filepath.Join(dir, "v.ext4")
	if err := ext4lite.Create(vol, 64<<20); err != nil {
		t.Fatal(err)
	}
	rw := "type=volume,src=" + vol + ",dst=/a"
	ro := rw + ",readonly"
	refused := func(what, want string, mounts ...string) {
		t.Helper()
		args := []string{"run", "-q"}
		for _, m := range mounts {
			args = append(args, "--mount", m)
		}
		_, errOut, code := runCLI(t, "", append(args, img, "true")...)
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 saying %q", what, code, errOut, want)
		}
	}
	refused("two read-write mounts in one sandbox", vol+" is already open read-write in this process (is it mounted twice?)",
		rw, "type=volume,src="+vol+",dst=/b")
	if out, errOut, code := runCLI(t, "", "run", "-q", "--mount", ro, "--mount", "type=volume,src="+vol+",dst=/b,readonly", img, "ls", "/a", "/b"); code != 0 {
		t.Errorf("two read-only mounts in one sandbox: exit %d %q %q", code, out, errOut)
	}

	holder := startHolding(t, img, rw)
	byHolder := fmt.Sprintf("%s is open read-write by process %d (rungv)", vol, holder.Process.Pid)
	refused("a second read-write sandbox", byHolder, rw)
	refused("a read-only sandbox beside a writer", byHolder, ro)
	if _, errOut, code := runCLI(t, "", "volume", "check", vol); code != 1 || !strings.Contains(errOut, byHolder) {
		t.Errorf("volume check of a volume in use: exit %d %q", code, errOut)
	}
	// Once the holder is killed, the volume is free again.
	holder.Process.Kill()
	holder.Wait()
	if _, errOut, code := runCLI(t, "", "run", "-q", "--mount", rw, img, "true"); code != 0 {
		t.Errorf("after the holder was killed: exit %d %s", code, errOut)
	}

	reader := startHolding(t, img, ro)
	if _, errOut, code := runCLI(t, "", "run", "-q", "--mount", ro, img, "ls", "/a"); code != 0 {
		t.Errorf("a second reader: exit %d %s", code, errOut)
	}
	refused("a writer beside a reader", fmt.Sprintf("%s is open read-only by process %d (rungv)", vol, reader.Process.Pid), rw)
	reader.Process.Kill()
	reader.Wait()

	// Clones share their golden read-only.
	var clones []string
	for _, name := range []string{"one.ext4", "two.ext4"} {
		c := filepath.Join(dir, name)
		if _, err := ext4lite.Clone(vol, c); err != nil {
			t.Fatal(err)
		}
		clones = append(clones, c)
	}
	startHolding(t, img, "type=volume,src="+clones[0]+",dst=/a")
	if _, errOut, code := runCLI(t, "", "run", "-q", "--mount", "type=volume,src="+clones[1]+",dst=/a", img, "touch", "/a/x"); code != 0 {
		t.Errorf("a second clone beside the first: exit %d %s", code, errOut)
	}
	if isDelta, _ := blockdev.IsDelta(clones[0]); isDelta {
		refused("writing the golden of a running clone", vol+" is open read-only by process", rw)
	}
}

// TestRunRefusesWhatIsNotAFile: a FIFO (or a device) named as a volume, a
// snapshot or an env file is refused at once, never opened: opening a FIFO
// would wait for a writer, deaf to SIGTERM.
func TestRunRefusesWhatIsNotAFile(t *testing.T) {
	img := testImage(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mount", "type=volume,src=" + fifo + ",dst=/data", img, "true"}, fifo + " is a named pipe (FIFO); only a regular file or a block device can be used here"},
		{[]string{"--mount", "type=volume,src=/dev/null,dst=/data,readonly", img, "true"}, "/dev/null is a character device"},
		{[]string{"--env-file", fifo, img, "true"}, "--env-file " + fifo + ": " + fifo + " is a named pipe (FIFO); only a regular file can be used here"},
		{[]string{"--restore", fifo, img}, "--restore: " + fifo + " is a named pipe (FIFO)"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, rungvBinary, append([]string{"--cache", sharedCache(t), "run", "-q"}, c.args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Errorf("rungv %v still ran after 20s (blocked opening the FIFO?)", c.args)
			continue
		}
		if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("rungv %v: exit %d (%v), stderr %q; want exit 1 saying %q", c.args, code, err, stderr.String(), c.want)
		}
	}
}
