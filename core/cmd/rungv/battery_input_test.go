package main

// The malformed-input part of the reliability battery (issue 17) for
// volumes and snapshots: corrupt and exotic ext4 volumes and damaged
// snapshots, each given to the real rungv, must end in a clear error (or
// in correct behaviour) — never a hang, a panic or a Go trace. Each case's
// time is measured; the slowest is reported, not asserted.

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// runBounded runs rungv with args and the shared cache, killing it at
// hangDeadline.
func runBounded(t *testing.T, args ...string) runResult {
	t.Helper()
	r, err := runRungv(nil, "", append([]string{"--cache", sharedCache(t)}, args...)...)
	if err != nil {
		t.Fatalf("starting rungv: %v", err)
	}
	return r
}

var (
	ioErrorRE = regexp.MustCompile(`(?i)input/output error|structure needs cleaning|bad message`)
	// bareErrors are messages that say nothing on their own.
	bareErrors = regexp.MustCompile(`(?i):\s*(input/output error|invalid argument|EOF|unexpected EOF|bad message|no such file or directory|operation not permitted|corrupt|failed|error)\s*$`)
)

// rungvLines returns rungv's own lines on stderr (the guest's stderr is
// relayed there too).
func rungvLines(stderr string) string {
	var b strings.Builder
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "rungv: ") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// clearRefusal reports whether msg, rungv's lines, names subject, the
// problem and what to do about it (one of hints).
func clearRefusal(msg, subject string, hints ...string) bool {
	if !strings.Contains(msg, subject) || bareErrors.MatchString(strings.TrimSpace(msg)) {
		return false
	}
	for _, h := range hints {
		if strings.Contains(msg, h) {
			return true
		}
	}
	return false
}

// volumeHints are the actions a refused volume's error may point to.
var volumeHints = []string{"rungv volume check", "e2fsck", "mke2fs", "tune2fs", "rungv volume create", "read-only"}

// guestScript reads everything on the volume, then writes. Its markers
// tell a refusal at start from a guest that ran.
const guestScript = `echo GUEST-RAN
ls -lR /v >/dev/null
for f in /v/dir/file /v/fast /v/slow /v/frag /v/xa /v/big/name-with-a-long-tail-to-fill-directory-blocks-0001; do head -c 4000000 $f >/dev/null; done
readlink /v/slow >/dev/null
ls /v/big | wc -l
echo x > /v/new && sync
echo GUEST-DONE`

// volumeOutcome classifies a run of guestScript on the volume vol.
func volumeOutcome(r runResult, vol string) (string, string) {
	if o, bad := crashed(r); bad {
		return o, fmt.Sprintf("stdout %q, stderr %q", r.stdout, r.stderr)
	}
	mine := rungvLines(r.stderr)
	if !strings.Contains(r.stdout, "GUEST-RAN") {
		if r.code != 0 && clearRefusal(mine, vol, volumeHints...) {
			return outClear, "refused: " + mine
		}
		return outUnclear, fmt.Sprintf("exit %d, stderr %q", r.code, r.stderr)
	}
	reported := strings.Contains(mine, vol) && strings.Contains(mine, "corrupt")
	if ioErrorRE.MatchString(r.stderr) && !reported {
		return outUnclear, fmt.Sprintf("the guest got I/O errors, rungv did not say why: exit %d, stderr %q", r.code, r.stderr)
	}
	if reported {
		return outClear, "guest saw I/O errors; rungv: " + mine
	}
	return outAccepted, fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
}

// debugfs runs requests on img (written when write) and returns the
// output.
func debugfsRun(t *testing.T, img string, write bool, requests ...string) string {
	t.Helper()
	args := []string{"-f", "-"}
	if write {
		args = append([]string{"-w"}, args...)
	}
	cmd := exec.Command("debugfs", append(args, img)...)
	cmd.Stdin = strings.NewReader(strings.Join(requests, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs %q on %s: %v\n%s", requests, img, err, out)
	}
	if write {
		// debugfs exits 0 after a failed request, which it reports as
		// "request: why".
		for _, l := range strings.Split(string(out), "\n") {
			for _, req := range requests {
				if cmd, _, _ := strings.Cut(req, " "); strings.HasPrefix(l, cmd+": ") {
					t.Fatalf("debugfs %q on %s failed: %s", requests, img, out)
				}
			}
		}
	}
	return string(out)
}

// debugfsNumber runs one request and returns the first submatch of re in
// its output as a number.
func debugfsNumber(t *testing.T, img, request, re string) int64 {
	t.Helper()
	out := debugfsRun(t, img, false, request)
	m := regexp.MustCompile(re).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("debugfs %q: no %s in\n%s", request, re, out)
	}
	n, err := strconv.ParseInt(m[1], 0, 64)
	if err != nil {
		t.Fatalf("debugfs %q: %v", request, err)
	}
	return n
}

// patch writes b at off in img.
func patch(t *testing.T, img string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(img, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func le16(v uint16) []byte { return []byte{byte(v), byte(v >> 8)} }
func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// copySparse copies src to a new file in dir.
func copySparse(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "--sparse=always", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
}

// e2fsckClean runs e2fsck -fn on img and returns its output when it is
// not clean.
func e2fsckClean(img string) (bool, string) {
	out, err := exec.Command("e2fsck", "-fn", img).CombinedOutput()
	return err == nil, string(out)
}
