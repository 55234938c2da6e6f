package ext4lite

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"z.gfire.dev/gvx/core/ext4lite/blockdev"
	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// CheckResult is the outcome of Check.
type CheckResult struct {
	// Checker is "e2fsck", or "ext4lite" when e2fsck is not installed
	// and Verify did the check.
	Checker string
	// Clean says e2fsck found nothing to fix and nothing to warn about,
	// and the filesystem does not need recovery.
	Clean bool
	// NeedsRecovery reports the superblock's needs_recovery flag.
	NeedsRecovery bool
	// ExitCode is e2fsck's exit status.
	ExitCode int
	// Problems are the output lines that made the check fail.
	Problems []string
	// Output is e2fsck's full output.
	Output string
}

var problemLine = regexp.MustCompile(`(?i)fix\?|warning|optimize\?|clear\?|salvage\?|relocate\?|recreate\?|run journal anyway|abort\?`)

// Check checks the image or delta at path without changing it. With
// e2fsprogs installed it runs `e2fsck -fn` (on a flattened copy of a
// delta); e2fsck exits 0 even when the filesystem needs recovery, so Check
// also reads the needs_recovery flag and scans the output for fixes and
// warnings. Without e2fsck it runs Verify.
func Check(path string) (*CheckResult, error) {
	e2fsck := findE2fsck()
	if e2fsck == "" {
		return checkWithVerify(path)
	}
	image := path
	if isDelta, err := blockdev.IsDelta(path); err != nil {
		return nil, err
	} else if isDelta {
		tmp, err := os.MkdirTemp("", "ext4lite-check-")
		if err != nil {
			return nil, fmt.Errorf("ext4lite: check: %w", err)
		}
		defer os.RemoveAll(tmp)
		image = filepath.Join(tmp, "flat.img")
		if err := Flatten(path, image); err != nil {
			return nil, err
		}
	}
	res := &CheckResult{Checker: "e2fsck"}
	sbBuf := make([]byte, disk.SuperblockSize)
	f, err := os.Open(image)
	if err != nil {
		return nil, fmt.Errorf("ext4lite: check: %w", err)
	}
	_, err = f.ReadAt(sbBuf, disk.SuperblockOffset)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("ext4lite: check: read superblock: %w", err)
	}
	if sb, err := disk.ParseSuperblock(sbBuf); err == nil {
		res.NeedsRecovery = sb.HasIncompat(disk.IncompatRecover)
	}
	cmd := exec.Command(e2fsck, "-fn", image)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	res.Output = out.String()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.ExitCode = exit.ExitCode()
	case err != nil:
		return nil, fmt.Errorf("ext4lite: run e2fsck: %w", err)
	}
	for _, line := range strings.Split(res.Output, "\n") {
		if problemLine.MatchString(line) {
			res.Problems = append(res.Problems, line)
		}
	}
	if res.NeedsRecovery {
		res.Problems = append(res.Problems, "superblock has needs_recovery set")
	}
	res.Clean = res.ExitCode == 0 && len(res.Problems) == 0
	return res, nil
}

func findE2fsck() string {
	if p, err := exec.LookPath("e2fsck"); err == nil {
		return p
	}
	for _, p := range []string{"/sbin/e2fsck", "/usr/sbin/e2fsck"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// checkWithVerify is Check without e2fsck.
func checkWithVerify(path string) (*CheckResult, error) {
	dev, err := blockdev.Open(path, true)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	problems, err := Verify(dev)
	if err != nil {
		return nil, err
	}
	res := &CheckResult{Checker: "ext4lite", Problems: problems, Output: strings.Join(problems, "\n")}
	buf := make([]byte, disk.SuperblockSize)
	if _, err := dev.ReadAt(buf, disk.SuperblockOffset); err == nil {
		if sb, err := disk.ParseSuperblockHeader(buf); err == nil {
			res.NeedsRecovery = sb.HasIncompat(disk.IncompatRecover)
		}
	}
	res.Clean = len(problems) == 0
	if !res.Clean {
		res.ExitCode = 4
	}
	return res, nil
}
