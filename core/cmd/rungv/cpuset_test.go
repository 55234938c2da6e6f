package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/internal/proctree"
	"z.gfire.dev/gvx/core/spec"
)

func TestParseCPUList(t *testing.T) {
	var all, two unix.CPUSet
	for c := range len(all) * 64 {
		all.Set(c)
	}
	two.Set(0)
	two.Set(1)
	for in, want := range map[string]string{
		"":          "[]",
		"3":         "[3]",
		"0-3,6":     "[0 1 2 3 6]",
		" 1 , 1-2 ": "[1 2]",
	} {
		got, err := parseCPUList(in)
		if err == nil {
			err = checkCPUs(got, &all)
		}
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("parseCPUList(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"a", "1-", "-1", "3-1", "1,,2"} {
		if got, err := parseCPUList(in); err == nil {
			t.Errorf("parseCPUList(%q) = %v, want an error", in, got)
		}
	}
	// A range is expanded up to the first CPU no process runs on, which
	// the check refuses.
	if got, err := parseCPUList("0-2147483647"); err != nil || len(got) != cpuSetSize+1 || checkCPUs(got, &all) == nil {
		t.Errorf("parseCPUList(0-2147483647) = %d CPUs, %v; want the %d of a CPU set and one more, refused", len(got), err, cpuSetSize)
	}
	// A CPU the process may not run on is named, with those it may.
	want := `sandbox spec: cpuset: 0-1024 names CPU 2, which this process may not run on: it may use 2 CPUs, 0-1; pick CPUs from those`
	if list, _ := parseCPUList("0-99999"); checkCPUs(list, &two) == nil || checkCPUs(list, &two).Error() != want {
		t.Errorf("0-99999 over CPUs 0-1: %v, want %q", checkCPUs(list, &two), want)
	}
}

// TestRunCPUSet pins a sandbox to one host CPU and checks, from the host,
// that every thread of rungv and of its platform stubs may run only there,
// and that the guest sees one CPU.
func TestRunCPUSet(t *testing.T) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Fatal(err)
	}
	if allowed.Count() < 2 {
		t.Skipf("this test process may run on %d CPU; pinning needs a choice of 2", allowed.Count())
	}
	cpu, notAllowed := -1, -1
	for c := 0; c < 1024; c++ {
		if allowed.IsSet(c) {
			cpu = c // the last allowed CPU: not the default first one
		} else if notAllowed < 0 {
			notAllowed = c
		}
	}

	img := testImage(t)
	cmd, _, c := startControlled(t, filepath.Join(t.TempDir(), "box.sock"), "--cpuset-cpus", strconv.Itoa(cpu), img)
	defer cmd.Wait()
	defer cmd.Process.Kill()
	defer c.Close()
	var out bytes.Buffer
	if res, err := c.Exec(context.Background(), control.ExecRequest{Exec: spec.Exec{Argv: []string{"busybox", "nproc"}}}, control.ExecIO{Stdout: &out}); err != nil || res.ExitCode != 0 {
		t.Fatalf("nproc: %+v %v", res, err)
	}
	if out.String() != "1\n" {
		t.Errorf("the guest sees %q CPUs, want 1 (as many as --cpuset-cpus names)", out.String())
	}

	want := strconv.Itoa(cpu)
	pids := []int{cmd.Process.Pid}
	stubs := 0
	for _, p := range proctree.Descendants(cmd.Process.Pid) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if bytes.Contains(cmdline, []byte(janitorCommand)) {
			continue // started before the sandbox; it only waits
		}
		pids = append(pids, p)
		stubs++
	}
	if stubs == 0 {
		t.Fatal("found no platform stub process under rungv")
	}
	for _, p := range pids {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", p, task.Name()))
			if err != nil {
				continue // exited meanwhile
			}
			if got := statusField(string(status), "Cpus_allowed_list"); got != want {
				t.Errorf("process %d thread %s may run on CPUs %q, want %q", p, task.Name(), got, want)
			}
		}
	}

	if notAllowed >= 0 {
		_, errOut, code := runCLI(t, "", "run", "-q", "--cpuset-cpus", strconv.Itoa(notAllowed), img, "true")
		if code == 0 || !strings.Contains(errOut, fmt.Sprintf("--cpuset-cpus %d names CPU %d, which this process may not run on", notAllowed, notAllowed)) {
			t.Errorf("--cpuset-cpus %d (not allowed): exit %d, %q", notAllowed, code, errOut)
		}
	}
	_, errOut, code := runCLI(t, "", "run", "-q", "--cpuset-cpus", "2-1", img, "true")
	if code == 0 || !strings.Contains(errOut, "--cpuset-cpus") || !strings.Contains(errOut, "0-3,6") {
		t.Errorf("--cpuset-cpus 2-1: exit %d, %q", code, errOut)
	}
}

// statusField returns the value of a "Name:\tvalue" line of a status file.
func statusField(status, name string) string {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
