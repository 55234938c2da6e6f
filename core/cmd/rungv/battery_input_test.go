package main

// The malformed-input part of the reliability battery (issue 17) for
// volumes and snapshots: corrupt and exotic ext4 volumes and damaged
// snapshots, each given to the real rungv, must end in a clear error (or
// in correct behaviour) — never a hang, a panic or a Go trace. Each case's
// time is measured; the slowest is reported, not asserted.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/internal/battery"
)

// outcome is how one case ended.
type outcome int

const (
	outcomeClear   outcome = iota // refused, or an I/O error rungv explained
	outcomeWorked                 // correct behaviour
	outcomeUnclear                // an error that does not say what and what to do
	outcomeHang
	outcomePanic
	outcomeTrace
)

func (o outcome) String() string {
	return [...]string{"clear error", "worked", "UNCLEAR ERROR", "HANG", "PANIC", "TRACE"}[o]
}

// inputTally counts the outcomes of a battery part and its slowest case.
type inputTally struct {
	n       [outcomeTrace + 1]int
	tried   int
	slowest time.Duration
	slowOne string
}

func (ty *inputTally) add(t *testing.T, name string, o outcome, took time.Duration, detail string) {
	t.Helper()
	ty.tried++
	ty.n[o]++
	if took > ty.slowest {
		ty.slowest, ty.slowOne = took, name
	}
	switch o {
	case outcomeClear, outcomeWorked:
		t.Logf("%s: %s in %v: %s", name, o, took.Round(time.Millisecond), truncate(detail, 300))
	default:
		t.Errorf("%s: %s after %v: %s", name, o, took.Round(time.Millisecond), detail)
	}
}

func (ty *inputTally) report(t *testing.T, title string) {
	t.Helper()
	battery.Table(t, title,
		[]string{"cases tried", "clear errors", "correct behaviour", "hangs", "panics", "traces", "unclear errors", "slowest case (ms)"},
		[]string{strconv.Itoa(ty.tried), strconv.Itoa(ty.n[outcomeClear]), strconv.Itoa(ty.n[outcomeWorked]),
			strconv.Itoa(ty.n[outcomeHang]), strconv.Itoa(ty.n[outcomePanic]), strconv.Itoa(ty.n[outcomeTrace]),
			strconv.Itoa(ty.n[outcomeUnclear]), fmt.Sprintf("%d (%s)", ty.slowest.Milliseconds(), ty.slowOne)})
}

// ran is what one rungv invocation did.
type ran struct {
	stdout, stderr string
	code           int
	hung           bool
	took           time.Duration
}

// runBounded runs rungv with args, killing it after hangDeadline.
func runBounded(t *testing.T, args ...string) ran {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, rungvBinary, append([]string{"--cache", sharedCache(t)}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := ran{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start), hung: ctx.Err() != nil}
	if cmd.ProcessState != nil {
		r.code = cmd.ProcessState.ExitCode()
	} else if err != nil {
		t.Fatalf("starting rungv: %v", err)
	}
	return r
}

var (
	goTrace   = regexp.MustCompile(`goroutine \d+ \[|\.go:\d+|runtime/debug\.Stack`)
	goPanic   = regexp.MustCompile(`(?m)^(panic: |fatal error: )`)
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

// crashed classifies what no case may do: hang, panic, or print a trace.
func crashed(r ran) (outcome, bool) {
	switch {
	case r.hung:
		return outcomeHang, true
	case goPanic.MatchString(r.stderr):
		return outcomePanic, true
	case goTrace.MatchString(r.stderr):
		return outcomeTrace, true
	}
	return 0, false
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
func volumeOutcome(r ran, vol string) (outcome, string) {
	if o, bad := crashed(r); bad {
		return o, fmt.Sprintf("stdout %q, stderr %q", r.stdout, r.stderr)
	}
	mine := rungvLines(r.stderr)
	if !strings.Contains(r.stdout, "GUEST-RAN") {
		if r.code != 0 && clearRefusal(mine, vol, volumeHints...) {
			return outcomeClear, "refused: " + mine
		}
		return outcomeUnclear, fmt.Sprintf("exit %d, stderr %q", r.code, r.stderr)
	}
	reported := strings.Contains(mine, vol) && strings.Contains(mine, "corrupt")
	if ioErrorRE.MatchString(r.stderr) && !reported {
		return outcomeUnclear, fmt.Sprintf("the guest got I/O errors, rungv did not say why: exit %d, stderr %q", r.code, r.stderr)
	}
	if reported {
		return outcomeClear, "guest saw I/O errors; rungv: " + mine
	}
	return outcomeWorked, fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
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
