package sentry

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/eventually"
	"z.gfire.dev/gvx/core/internal/proctree"
	"z.gfire.dev/gvx/core/lockdown"
)

// TestLockedSandbox runs a sandbox with host lockdown in a helper process
// and checks both the guest's work and the host confinement.
func TestLockedSandbox(t *testing.T) {
	cmd := helperCmd(t, "locked")
	stdin, _ := cmd.StdinPipe()
	stdoutPipe, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	out := bufio.NewReader(stdoutPipe)
	timing := readLine(t, out)
	t.Logf("locked helper: %s", strings.TrimSpace(timing))
	if l := readLine(t, out); !strings.HasPrefix(l, "locked pid=") {
		cmd.Wait()
		t.Fatalf("helper: %q; stderr %q", l, stderr.String())
	}

	st, err := lockdown.ReadStatus(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !st.NoNewPrivs || st.Seccomp != 2 || st.CapEff != 0 || st.CapPrm != 0 {
		t.Errorf("rungv-like process is not locked down: %+v", st)
	}
	io.WriteString(stdin, "go\n")
	rest, _ := io.ReadAll(out)
	err = cmd.Wait()
	got := string(rest)
	for _, want := range []string{
		`exec "echo hello from a locked host": code=0 out="hello from a locked host\n"`,
		`exec "exit 1": code=1 out=""`,
		`exec "kill -9 $$": code=137 out=""`,
		`exec "cat /etc/gvx-marker": code=0 out="gvx test image\n"`,
		`exec "id -u; cat /proc/1/comm": code=0 out="0\nsleep\n"`,
		`exec "mkdir -p /mnt/x && mount -t tmpfs none /mnt/x && echo m > /mnt/x/f && cat /mnt/x/f": code=0 out="m\n"`,
		fmt.Sprintf("exec %q: code=0 out=%q", loopbackRoundTrip("net"), "net\n"),
		"parallel good=50\n",
		`files guest-read="hw" host-read="gvx test image\n"`,
		`tty code=0 out="tty-ok\r\n24 80\r\n"`,
		"hog code=137\n",
		"shutdown init=143\n", // SIGTERM
	} {
		if !strings.Contains(got, want) {
			t.Errorf("helper output lacks %q", want)
		}
	}
	if err != nil || t.Failed() {
		t.Fatalf("helper: %v\nstdout:\n%s\nstderr:\n%s", err, got, stderr.String())
	}
}

// TestKill9LeavesNothing kills a process hosting a sandbox with SIGKILL and
// checks that the platform's stub processes die with it.
func TestKill9LeavesNothing(t *testing.T) {
	cmd := helperCmd(t, "hold")
	stdoutPipe, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if l := readLine(t, bufio.NewReader(stdoutPipe)); !strings.HasPrefix(l, "holding") {
		cmd.Wait()
		t.Fatalf("helper: %q; stderr %q", l, stderr.String())
	}
	stubs := proctree.Descendants(cmd.Process.Pid)
	if len(stubs) == 0 {
		t.Fatal("the sandbox process has no child processes; expected systrap stubs")
	}
	// The sandbox holds no host file of its own: guest memory is in
	// anonymous memfds, and the only file is the image.
	for _, target := range openFiles(cmd.Process.Pid) {
		switch {
		case !strings.HasPrefix(target, "/"), strings.HasPrefix(target, "/memfd:"):
			// pipes, sockets, anon inodes, memfds
		case target == imagePath, target == "/dev/null":
		case strings.HasPrefix(target, "/sys/fs/cgroup/"):
			// The Go runtime's cgroup-aware GOMAXPROCS, read-only.
		default:
			t.Errorf("the sandbox process holds host file %s", target)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	eventually.Within(t, 5*time.Second, "the stub processes to die with the sandbox process", func() (bool, error) {
		var alive []int
		for _, pid := range stubs {
			if processAlive(pid) {
				alive = append(alive, pid)
			}
		}
		return len(alive) == 0, fmt.Errorf("stub processes %v outlived it", alive)
	})
	t.Logf("%d stub processes died with the sandbox process", len(stubs))
}

// statFields returns the fields of /proc/pid/stat after the command name.
func statFields(pid int) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	f := statFields(pid)
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// openFiles returns the targets of pid's open descriptors.
func openFiles(pid int) []string {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if target, err := os.Readlink(dir + "/" + e.Name()); err == nil {
			out = append(out, target)
		}
	}
	return out
}
