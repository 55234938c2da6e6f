package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/internal/proctree"
	"z.gfire.dev/gvx/core/lockdown"
)

// TestJanitorIsLockedDown finds the socket janitor of a sandbox with a
// control socket and checks, from the host, that it runs with no new
// privileges, a seccomp filter and no capabilities (but CAP_DAC_OVERRIDE
// when root made the socket in a directory only that capability let it
// write), holds no descriptor but its pipe, stderr and the Go runtime's
// own, and still removes the socket once rungv is gone.
func TestJanitorIsLockedDown(t *testing.T) {
	img := testImage(t)
	t.Run("own directory", func(t *testing.T) {
		checkJanitor(t, img, t.TempDir(), 0)
	})
	t.Run("directory only CAP_DAC_OVERRIDE may write", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("needs root, to make a socket in another user's directory")
		}
		dir := filepath.Join(t.TempDir(), "nobody")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		checkJanitor(t, img, dir, 1<<unix.CAP_DAC_OVERRIDE)
	})
}

func checkJanitor(t *testing.T, img, dir string, wantCaps uint64) {
	sock := filepath.Join(dir, "box.sock")
	// Descriptors rungv inherits without close-on-exec, as from a shell
	// (3 and 4: the janitor's 3 is its pipe).
	leaked, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer leaked.Close()
	cmd := exec.Command(rungvBinary, "--cache", sharedCache(t), "run", "-q", "--keep-alive", "--control", "unix:"+sock, img)
	cmd.ExtraFiles = []*os.File{leaked, leaked}
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var c *control.Client
	for deadline := time.Now().Add(60 * time.Second); c == nil; time.Sleep(20 * time.Millisecond) {
		if c, err = control.Dial(context.Background(), "unix:"+sock); err != nil && time.Now().After(deadline) {
			t.Fatalf("dial: %v (%s)", err, stderr.String())
		}
	}
	c.Close()

	janitor := 0
	for _, p := range proctree.Descendants(cmd.Process.Pid) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if args := strings.Split(string(cmdline), "\x00"); len(args) > 1 && args[1] == janitorCommand {
			janitor = p
		}
	}
	if janitor == 0 {
		t.Fatal("found no janitor process under rungv")
	}
	// The janitor locks itself down as it starts, beside rungv's own start.
	var st lockdown.Status
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, err = lockdown.ReadStatus(janitor); err != nil {
			t.Fatal(err)
		}
		if st.Seccomp != 0 || time.Now().After(deadline) {
			break
		}
	}
	if !st.NoNewPrivs || st.Seccomp != 2 || st.CapEff != wantCaps || st.CapPrm != wantCaps {
		t.Errorf("janitor status %+v; want NoNewPrivs, Seccomp 2, CapEff and CapPrm %#x", st, wantCaps)
	}
	if os.Getuid() == 0 && st.CapBnd != 0 {
		t.Errorf("janitor bounding set %#x, want empty", st.CapBnd)
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", janitor))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", janitor, e.Name()))
		switch {
		case e.Name() == "2" && target == os.DevNull,
			e.Name() == "3" && strings.HasPrefix(target, "pipe:"),
			// The Go runtime's own: its netpoller and the CPU quota
			// files it reads at start.
			target == "anon_inode:[eventpoll]", target == "anon_inode:[eventfd]",
			strings.HasPrefix(target, "/sys/fs/cgroup/"):
		default:
			t.Errorf("the janitor holds descriptor %s (%s); want only its pipe (3) and stderr (2)", e.Name(), target)
		}
	}

	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("rungv after SIGTERM: %v (%s)", err, stderr.String())
	}
	waitRemoved(t, sock, "the control socket")
	// Its work done, it exits (a zombie until its new parent reaps it).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", janitor))
		if err != nil || bytes.Contains(stat, []byte(") Z ")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the janitor still runs 10 s after rungv exited")
		}
	}
}
