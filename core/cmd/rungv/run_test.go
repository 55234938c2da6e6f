package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// These tests run `rungv run` as a user would: the real binary, the
// Sentry, the test image.

func TestRunExitCodes(t *testing.T) {
	img := testImage(t)
	for script, want := range map[string]int{"true": 0, "exit 1": 1, "exit 3": 3, "kill -9 $$": 137} {
		if _, errOut, code := runCLI(t, "", "run", "-q", img, "sh", "-c", script); code != want {
			t.Errorf("%q: exit %d, want %d (%s)", script, code, want, errOut)
		}
	}
	_, errOut, code := runCLI(t, "", "run", "-q", img, "no-such-command")
	if code != 127 || !strings.Contains(errOut, `rungv: exec: "no-such-command": executable file not found in $PATH`) {
		t.Errorf("missing command: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "", "run", "-q", img, "/no/such/cmd"); code != 127 || !strings.Contains(errOut, `rungv: exec: "/no/such/cmd": no such file or directory`) {
		t.Errorf("missing path: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "", "run", "-q", img, "/etc/passwd"); code != 126 || !strings.Contains(errOut, `rungv: exec: "/etc/passwd": permission denied`) {
		t.Errorf("file that is not executable: exit %d, %q", code, errOut)
	}
}

// TestStartFailureToFilesIsPrompt: with stdout and stderr regular files
// (rungv run … >log 2>&1, or a Python caller's), a sandbox that fails to
// start reports it and exits at once, not after waiting for output
// copies whose pipes rungv itself still holds.
func TestStartFailureToFilesIsPrompt(t *testing.T) {
	img := testImage(t)
	dir := t.TempDir()
	notExt4 := filepath.Join(dir, "not.ext4")
	if err := os.WriteFile(notExt4, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"missing command", []string{img, "no-such-command"}, 127, "executable file not found"},
		{"bad volume", []string{"--mount", "type=volume,src=" + notExt4 + ",dst=/data", img, "true"}, 1, "rungv volume check"},
	} {
		t.Run(c.name, func(t *testing.T) {
			log, err := os.Create(filepath.Join(dir, "log"))
			if err != nil {
				t.Fatal(err)
			}
			defer log.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, rungvBinary, append([]string{"--cache", sharedCache(t), "run", "-q"}, c.args...)...)
			cmd.Stdout, cmd.Stderr = log, log
			start := time.Now()
			err = cmd.Run()
			took := time.Since(start)
			said, _ := os.ReadFile(log.Name())
			if code := cmd.ProcessState.ExitCode(); code != c.code || !strings.Contains(string(said), c.want) {
				t.Errorf("exit %d (%v), output %q; want exit %d saying %q", code, err, said, c.code, c.want)
			}
			// The old exit path waited 5s; a start takes well under 1s.
			if took > 2500*time.Millisecond {
				t.Errorf("rungv took %v to report a failed start", took)
			}
		})
	}
}

// TestInitKilledForMemorySaysSo: when the OOM killer's victim is init, the
// sandbox ends; rungv says why instead of only exiting 137.
func TestInitKilledForMemorySaysSo(t *testing.T) {
	img := testImage(t)
	// Files in /dev/shm hold 40 of the 48 MiB; the shell that is init then
	// grows past the rest while it reads 30 MB into a variable.
	_, errOut, code := runCLI(t, "", "run", "-q", "-m", "48m", img, "sh", "-c",
		`dd if=/dev/zero of=/dev/shm/x bs=1M count=40 2>/dev/null; x=$(head -c 30000000 /dev/zero | tr "\0" a); echo survived`)
	if code != 137 || !strings.Contains(errOut, "reached its memory limit (48 MiB) and its OOM killer killed the init process") {
		t.Errorf("exit %d, stderr %q; want 137 and the reason", code, errOut)
	}
	// A victim that is not init leaves no such line: the sandbox goes on.
	out, errOut, code := runCLI(t, "", "run", "-q", "-m", "48m", img, "sh", "-c", `awk 'BEGIN { s = "x"; while (1) s = s s }'; echo survived $?`)
	if code != 0 || out != "survived 137\n" || strings.Contains(errOut, "OOM killer") {
		t.Errorf("a hog that is not init: exit %d, %q, %q", code, out, errOut)
	}
}

func TestRunFlags(t *testing.T) {
	img := testImage(t)
	envFile := filepath.Join(t.TempDir(), "env")
	os.WriteFile(envFile, []byte("FROM_FILE=yes\n"), 0o644)
	out, errOut, code := runCLI(t, "", "run", "-q", "-e", "A=1", "--env-file", envFile, "-w", "/tmp/work", "-u", "nobody",
		"--hostname", "box", img, "sh", "-c", `echo "$A $FROM_FILE $GVX_TEST $(pwd) $(id -un) $(hostname)"`)
	if code != 0 || out != "1 yes 1 /tmp/work nobody box\n" {
		t.Errorf("flags: exit %d, %q %q", code, out, errOut)
	}
	out, _, _ = runCLI(t, "", "run", "-q", "--entrypoint", "/bin/echo", img, "entry", "point")
	if out != "entry point\n" {
		t.Errorf("--entrypoint: %q", out)
	}
	out, _, _ = runCLI(t, "piped input", "run", "-q", "-i", img, "cat")
	if out != "piped input" {
		t.Errorf("-i: %q", out)
	}
	if out, _, _ = runCLI(t, "ignored", "run", "-q", img, "cat"); out != "" {
		t.Errorf("stdin without -i must be empty: %q", out)
	}
}

// TestDockerOnlyFlagsSayWhatToDoInstead: docker run flags rungv does not
// take are refused with what to use instead, not "unknown flag".
func TestDockerOnlyFlagsSayWhatToDoInstead(t *testing.T) {
	img := testImage(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-v", "/tmp:/data"}, "--volume is a docker run flag that rungv does not take: a sandbox never sees host directories; attach an ext4 volume with --mount"},
		{[]string{"--privileged"}, "--privileged is a docker run flag that rungv does not take: a sandbox needs none"},
		{[]string{"-d"}, "--detach is a docker run flag that rungv does not take"},
		{[]string{"--name", "box"}, "--name is a docker run flag that rungv does not take"},
	} {
		args := append(append([]string{"run", "-q"}, tc.args...), img, "true")
		_, errOut, code := runCLI(t, "", args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("rungv %v: exit %d, stderr %q; want it to say %q", args, code, errOut, tc.want)
		}
	}
}

// TestExitStatusLines: the exit status pipe holds the command's status
// alone when the sandbox closed cleanly, and a second line, one Go-quoted
// string, with why it did not otherwise; however long and many-lined the
// error, both lines fit in one write the pipe takes whole.
func TestExitStatusLines(t *testing.T) {
	var b strings.Builder
	writeExitStatus(&b, 137, nil)
	if b.String() != "137\n" {
		t.Errorf("a clean close: %q; want only the status line", b.String())
	}
	for _, msg := range []string{
		"ext4fs: closing the volume: write: file too large\nand a second volume: 100% full",
		strings.Repeat("\x00\"é\n", 20000),
	} {
		b.Reset()
		writeExitStatus(&b, 3, errors.New(msg))
		out := b.String()
		lines := strings.SplitAfter(out, "\n")
		if len(out) > exitStatusMax || len(lines) != 3 || lines[0] != "3\n" || lines[2] != "" {
			t.Errorf("%d bytes in %d lines, first %q; want the status and one line, at most %d bytes", len(out), len(lines)-1, lines[0], exitStatusMax)
			continue
		}
		got, err := strconv.Unquote(strings.TrimSuffix(lines[1], "\n"))
		if err != nil {
			t.Errorf("the second line is not a Go-quoted string: %v", err)
		}
		if got != msg && !(strings.HasSuffix(got, " …") && strings.HasPrefix(msg, strings.TrimSuffix(got, " …"))) {
			t.Errorf("the second line says %q; want %q or its start", got, msg)
		}
	}
}
