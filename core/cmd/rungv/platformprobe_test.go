package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKVMNeverHangs: `--platform kvm` either runs the command or says, in
// bounded time, that kvm does not work here and what to use. On hosts where
// kvm hangs (nested virtualization, as on these machines) rungv used to
// hang for good, deaf to SIGTERM. The outcome is remembered: the second run
// answers at once, the same way.
func TestKVMNeverHangs(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skipf("no /dev/kvm here (%v): nothing to probe", err)
	}
	cache := t.TempDir()
	image := testImage(t)
	if _, errOut, code := rungv(t, cache, "pull", "-q", image); code != 0 {
		t.Fatalf("pull: %s", errOut)
	}
	run := func() (string, string, int, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*platformProbeTimeout+30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, rungvBinary, "--cache", cache, "run", "-q", "--platform", "kvm", image, "echo", "kvm-works")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		if ctx.Err() != nil {
			t.Fatalf("rungv --platform kvm still ran after %v: it hangs", time.Since(start))
		}
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code, time.Since(start)
	}

	out, errOut, code, took := run()
	records, _ := filepath.Glob(filepath.Join(cache, "platform-probes", "kvm-*"))
	if len(records) == 0 && code != 0 && strings.Contains(errOut, "a probe sandbox failed") {
		// kvm fails at once on this host instead of hanging; such a
		// failure is not recorded (checkKVM), so there is nothing more
		// to check than what it says.
		t.Logf("kvm fails at once here (%v): %.200s", took, errOut)
		for _, want := range []string{"--platform kvm does not work on this host", "use --platform systrap"} {
			if !strings.Contains(errOut, want) {
				t.Fatalf("stderr %q does not say %q", errOut, want)
			}
		}
		// A crashed probe is reported by its crash's head, not by every
		// goroutine's stack.
		if n := strings.Count(errOut, "\ngoroutine "); n > 1 {
			t.Errorf("the report holds %d goroutine stacks (%d bytes); want the crash's head only", n, len(errOut))
		}
		if leftover := probeProcesses(t, cache); len(leftover) > 0 {
			t.Errorf("the probe left processes behind: %v", leftover)
		}
		return
	}
	if len(records) != 1 {
		t.Fatalf("want one record of the probe's outcome, have %v", records)
	}
	if leftover := probeProcesses(t, cache); len(leftover) > 0 {
		t.Errorf("the probe left processes behind: %v", leftover)
	}
	if code == 0 {
		t.Logf("kvm works here (%v)", took)
		if out != "kvm-works\n" || !strings.HasSuffix(records[0], ".ok") {
			t.Fatalf("kvm run: stdout %q, record %s", out, records[0])
		}
	} else {
		t.Logf("kvm does not work here: %s (%v)", strings.TrimSpace(errOut), took)
		for _, want := range []string{"--platform kvm does not work on this host", "use --platform systrap"} {
			if !strings.Contains(errOut, want) {
				t.Fatalf("stderr %q does not say %q", errOut, want)
			}
		}
		if !strings.HasSuffix(records[0], ".failed") {
			t.Fatalf("record %s after a failed probe", records[0])
		}
	}

	out2, errOut2, code2, took2 := run()
	if code2 != code || out2 != out {
		t.Fatalf("second run: exit %d, %q, %q; first: exit %d", code2, out2, errOut2, code)
	}
	if code2 != 0 && (!strings.Contains(errOut2, "found earlier since this boot") || took2 > 5*time.Second) {
		t.Fatalf("second run did not use the recorded failure: %q in %v", errOut2, took2)
	}
}

// probeProcesses lists live platform probes started for cache.
func probeProcesses(t *testing.T, cache string) []string {
	t.Helper()
	var found []string
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if cmdline := string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})); strings.Contains(cmdline, platformProbeCommand) && strings.Contains(cmdline, cache) {
			found = append(found, e.Name()+": "+cmdline)
		}
	}
	return found
}
