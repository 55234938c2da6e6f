package main

// Driving a running sandbox: a TTY, timeouts and signals, the control socket.

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/internal/ptytest"
	"z.gfire.dev/gvx/core/spec"
)

func TestRunTTY(t *testing.T) {
	img := testImage(t)
	master, replica, err := ptytest.Open()
	if err != nil {
		t.Skipf("no host pseudo-terminals: %v", err)
	}
	defer master.Close()
	cmd := exec.Command(rungvBinary, "--cache", sharedCache(t), "run", "-q", "-t", img, "sh", "-c", "test -t 0 && test -t 1 && echo tty-yes $TERM")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = replica, replica, replica
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	replica.Close()
	got := make(chan string, 1)
	go func() {
		r := bufio.NewReader(master)
		var all strings.Builder
		for {
			line, err := r.ReadString('\n')
			all.WriteString(line)
			if strings.Contains(all.String(), "tty-yes") || err != nil {
				got <- all.String()
				return
			}
		}
	}()
	select {
	case out := <-got:
		if !strings.Contains(out, "tty-yes xterm") {
			t.Errorf("-t: the command did not see a terminal: %q", out)
		}
	case <-time.After(60 * time.Second):
		t.Error("-t: no output")
	}
	cmd.Wait()
	_, errOut, code := runCLI(t, "", "run", "-q", "-t", img, "true")
	if code == 0 || !strings.Contains(errOut, "not a TTY") {
		t.Errorf("-t without a terminal: exit %d, %q", code, errOut)
	}
}

func TestRunTimeoutAndSignals(t *testing.T) {
	img := testImage(t)
	_, errOut, code := runCLI(t, "", "run", "-q", "--timeout", "500ms", img, "sleep", "30")
	if code != 143 || !strings.Contains(errOut, "--timeout 500ms reached") {
		t.Errorf("--timeout: exit %d, %q", code, errOut)
	}
	// SIGTERM to rungv reaches the command, which ends on its own terms.
	cmd := exec.Command(rungvBinary, "--cache", sharedCache(t), "run", "-q", img, "sh", "-c",
		`trap 'echo got TERM; exit 5' TERM; echo ready; while :; do sleep 0.05; done`)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	if line, _ := r.ReadString('\n'); line != "ready\n" {
		t.Fatalf("no ready line: %q", line)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	rest, _ := r.ReadString('\n')
	err := cmd.Wait()
	if rest != "got TERM\n" || cmd.ProcessState.ExitCode() != 5 {
		t.Errorf("SIGTERM forwarding: %q, %v", rest, err)
	}
	// A command that ignores SIGTERM is killed after --stop-timeout.
	cmd = exec.Command(rungvBinary, "--cache", sharedCache(t), "run", "-q", "--stop-timeout", "300ms", img, "sh", "-c",
		`trap '' TERM; echo ready; while :; do sleep 0.05; done`)
	stdout, _ = cmd.StdoutPipe()
	cmd.Start()
	bufio.NewReader(stdout).ReadString('\n')
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 137 || time.Since(start) > 20*time.Second {
		t.Errorf("ignored SIGTERM: exit %d after %v, want 137 soon after 300ms", code, time.Since(start))
	}
}

// TestRunControlSocket drives a --keep-alive sandbox through its control
// socket, then stops it: the socket file is gone afterwards.
func TestRunControlSocket(t *testing.T) {
	img := testImage(t)
	sock := filepath.Join(t.TempDir(), "box.sock")
	cmd, stderr, c := startControlled(t, sock, img)
	defer cmd.Process.Kill()
	var out bytes.Buffer
	res, err := c.Exec(context.Background(), control.ExecRequest{Exec: spec.Exec{Argv: []string{"sh", "-c", "echo via socket; exit 4"}}}, control.ExecIO{Stdout: &out})
	if err != nil || res.ExitCode != 4 || out.String() != "via socket\n" {
		t.Fatalf("exec over the socket: %+v %q %v", res, out.String(), err)
	}
	if st, _ := os.Stat(sock); st == nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the control socket must be private (0600): %v", st)
	}
	c.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("rungv after SIGTERM: %v (%s)", err, stderr.String())
	}
	waitRemoved(t, sock, "the control socket")
	_, errOut, code := runCLI(t, "", "run", "--keep-alive", img)
	if code == 0 || !strings.Contains(errOut, "--control") {
		t.Errorf("--keep-alive without --control: exit %d, %q", code, errOut)
	}
}

// TestRunSIGTERMWhileBooting: a SIGTERM that comes while the sandbox boots
// (or while rungv reads the image, before it boots) stops it once init runs;
// it used to be taken by rungv's signal context only, and rungv then ran
// its command to the end. The signals are sent at points spread over the
// start, a fault injected at each, not a wait for anything.
func TestRunSIGTERMWhileBooting(t *testing.T) {
	img := testImage(t)
	for _, after := range []time.Duration{0, 10 * time.Millisecond, 25 * time.Millisecond, 40 * time.Millisecond, 60 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond} {
		cmd := exec.Command(rungvBinary, "--cache", sharedCache(t), "run", "-q", "--stop-timeout", "2s", img, "sleep", "600")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(after, func() { cmd.Process.Signal(syscall.SIGTERM) })
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		select {
		case <-exited:
			// 143: init ended by the SIGTERM; 1: rungv stopped before it
			// booted, saying so; killed by it: before rungv listened for
			// signals at all.
			st := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if code := st.ExitStatus(); code != 143 && code != 1 && !(st.Signaled() && st.Signal() == syscall.SIGTERM) {
				t.Errorf("SIGTERM %v after the start: %v (%s), want exit 143", after, cmd.ProcessState, stderr.String())
			}
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("SIGTERM %v after the start: rungv still ran a minute later (--stop-timeout 2s)", after)
		}
	}
}
