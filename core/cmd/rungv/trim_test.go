package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/spec"
)

// binaryRSS returns how many KiB of its own executable's read-only mappings
// (code and read-only data) process pid has resident.
func binaryRSS(t *testing.T, pid int) int {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kb := 0
	ours := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			ours = len(fields) >= 6 && strings.Join(fields[5:], " ") == exe && !strings.Contains(fields[1], "w")
			continue
		}
		if ours && len(fields) >= 2 && fields[0] == "Rss:" {
			var n int
			fmt.Sscan(fields[1], &n)
			kb += n
		}
	}
	return kb
}

// TestIdleTrim checks that a sandbox left alone gives back its mappings of
// rungv's code and read-only data, that one with --idle-trim 0 keeps them,
// and that a trimmed sandbox goes on working.
func TestIdleTrim(t *testing.T) {
	img := testImage(t)
	dir := t.TempDir()
	exec := func(c *control.Client, script string) string {
		t.Helper()
		var out strings.Builder
		res, err := c.Exec(context.Background(), control.ExecRequest{Exec: spec.Exec{Argv: []string{"sh", "-c", script}}}, control.ExecIO{Stdout: &out})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q: %+v %v", script, res, err)
		}
		return out.String()
	}
	kept, _, keptClient := startControlled(t, filepath.Join(dir, "kept.sock"), "--idle-trim", "0", img)
	defer kept.Process.Kill()
	defer keptClient.Close()
	trimmed, _, trimmedClient := startControlled(t, filepath.Join(dir, "trimmed.sock"), "--idle-trim", "100ms", img)
	defer trimmed.Process.Kill()
	defer trimmedClient.Close()
	exec(keptClient, "true")
	exec(trimmedClient, "true")

	var keptKB, trimmedKB int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		keptKB, trimmedKB = binaryRSS(t, kept.Process.Pid), binaryRSS(t, trimmed.Process.Pid)
		if trimmedKB*4 < keptKB {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s idle, the trimmed sandbox maps %d KiB of rungv, the untrimmed one %d KiB", trimmedKB, keptKB)
		}
	}
	t.Logf("rungv's code and read-only data mapped while idle: %d KiB with --idle-trim 0, %d KiB trimmed", keptKB, trimmedKB)
	if got := exec(trimmedClient, "echo still here"); got != "still here\n" {
		t.Fatalf("exec after the trim: %q", got)
	}
}

func TestIdleTrimEnvErrors(t *testing.T) {
	t.Setenv("GVX_IDLE_TRIM", "soon")
	_, errOut, code := runCLI(t, "", "run", testImage(t), "true")
	if code == 0 || !strings.Contains(errOut, `GVX_IDLE_TRIM="soon"`) || !strings.Contains(errOut, "0 to never trim") {
		t.Errorf("GVX_IDLE_TRIM=soon: exit %d, %q", code, errOut)
	}
}
