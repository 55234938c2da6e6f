package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"z.gfire.dev/gvx/core/internal/tailbuf"
	"z.gfire.dev/gvx/core/sentry"
)

// The kvm platform can hang a process for good. Under nested
// virtualization (these machines, and most cloud VMs), gVisor's kvm
// platform boots, then its first guest instruction never returns; the next
// garbage collection then waits for that thread forever, so the whole
// process stops, SIGTERM included, and only SIGKILL ends it. rungv
// therefore tries kvm first in a child it can kill: the child boots a
// sandbox on the same image and runs the built-in idle init to its exit.
// The outcome is remembered per host boot and rungv version, so only the
// first kvm sandbox after a reboot pays for the probe.

const platformProbeCommand = "__platform-probe"

// platformProbeTimeout bounds the probe. A working kvm platform finishes it
// in tens of milliseconds.
const platformProbeTimeout = 10 * time.Second

// probeOK is what a probe that finished prints.
const probeOK = "platform-probe-ok"

// checkKVM returns nil if the kvm platform runs guest code on this host,
// and an error saying what to use instead if it does not. cacheDir holds
// the outcome of an earlier probe.
func checkKVM(cacheDir, erofsPath string) error {
	okFile, failFile := kvmProbeRecords(cacheDir)
	if okFile != "" {
		if _, err := os.Stat(okFile); err == nil {
			return nil
		}
		if why, err := os.ReadFile(failFile); err == nil {
			return fmt.Errorf("--platform kvm does not work on this host: %s (found earlier since this boot; delete %s to try again); use --platform systrap (the default)",
				strings.TrimSpace(string(why)), failFile)
		}
	}
	// Success and a hang are facts about this host until it reboots; other
	// failures (no access to /dev/kvm, say) are quick to find again and may
	// be fixed meanwhile, so they are not recorded.
	err := runPlatformProbe(sentry.PlatformKVM, erofsPath, platformProbeTimeout)
	switch {
	case okFile == "":
	case err == nil:
		writeProbeRecord(okFile, version)
	case errors.Is(err, errProbeHung):
		writeProbeRecord(failFile, err.Error())
	}
	if err != nil {
		return fmt.Errorf("--platform kvm does not work on this host: %w; use --platform systrap (the default)", err)
	}
	return nil
}

// writeProbeRecord records a probe's outcome. A record that cannot be
// written only costs the next kvm sandbox another probe.
func writeProbeRecord(path, content string) {
	if os.MkdirAll(filepath.Dir(path), 0o755) == nil {
		os.WriteFile(path, []byte(content+"\n"), 0o644)
	}
}

// kvmProbeRecords names the files that record a kvm probe's success or
// failure for this host boot and this rungv, or "" if the boot cannot be
// identified.
func kvmProbeRecords(cacheDir string) (ok, failed string) {
	id, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", ""
	}
	name := strings.ReplaceAll(fmt.Sprintf("kvm-%s-%s", strings.TrimSpace(string(id)), version), "/", "_")
	dir := filepath.Join(cacheDir, "platform-probes")
	return filepath.Join(dir, name+".ok"), filepath.Join(dir, name+".failed")
}

// runPlatformProbe runs the probe for platform p in a child process and
// kills it after timeout.
func runPlatformProbe(p sentry.Platform, erofsPath string, timeout time.Duration) error {
	out := &tailbuf.Buffer{Max: probeOutputMax}
	cmd := exec.Command("/proc/self/exe", platformProbeCommand, string(p), erofsPath)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: a Ctrl-C meant for rungv must not reach it
	// first, and rungv kills it when it is done with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the platform probe: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), probeOK) {
			return fmt.Errorf("a probe sandbox failed: %v: %s", err, probeReport(out))
		}
		return nil
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("%w: a probe sandbox's first guest instructions did not finish within %v (kvm under nested virtualization hangs this way)", errProbeHung, timeout)
	}
}

// probeOutputMax bounds what is kept of a probe's output.
const probeOutputMax = 4 << 10

// probeReport is what a failed probe said: the head of its crash report if
// it crashed (a Go crash prints every goroutine's stack, which says nothing
// more to the user), or the end of its output.
func probeReport(out *tailbuf.Buffer) string {
	if head, more := out.Crash(); head != "" {
		if more > 0 {
			head += fmt.Sprintf("\n… and %d more lines of its crash report", more)
		}
		return head
	}
	return strings.TrimSpace(out.String())
}

// errProbeHung marks a probe that had to be killed.
var errProbeHung = errors.New("it hangs")

func newPlatformProbeCommand() *cobra.Command {
	return &cobra.Command{
		Use:    platformProbeCommand + " PLATFORM EROFS-IMAGE",
		Hidden: true,
		Args:   cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := probePlatform(sentry.Platform(args[0]), args[1]); err != nil {
				return err
			}
			fmt.Println(probeOK)
			return nil
		},
	}
}

// probePlatform boots a sandbox on platform p and runs the built-in idle
// init until SIGTERM ends it.
func probePlatform(p sentry.Platform, erofsPath string) error {
	img, err := os.Open(erofsPath)
	if err != nil {
		return err
	}
	defer img.Close()
	sb, err := sentry.New(sentry.Config{Image: img, Platform: p})
	if err != nil {
		return err
	}
	defer sb.Close()
	init, err := sb.StartIdle()
	if err != nil {
		return err
	}
	if err := init.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, sentry.ErrProcessDone) {
		return err
	}
	st, err := init.Wait()
	if err != nil {
		return err
	}
	if st.ExitCode() != 0 {
		return fmt.Errorf("the idle init exited with %d", st.ExitCode())
	}
	return nil
}
