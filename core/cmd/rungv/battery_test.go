package main

// What the malformed-input parts of the reliability battery (issue 17)
// share: hostile input goes to the real rungv binary, in a scratch home,
// temporary directory and working directory, and each run is classified as
// accepted, a clear error, an unclear error, a trace, a panic or a hang.

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/internal/battery"
)

// hangDeadline is how long a case may run before it counts as a hang. It is
// generous (the machine is shared); the slowest case is what is reported.
const hangDeadline = 60 * time.Second

// Outcomes of one battery case.
const (
	outAccepted = "accepted"
	outClear    = "clear error"
	outUnclear  = "unclear error"
	outTrace    = "trace"
	outPanic    = "panic"
	outHang     = "hang"
)

// scratch is where a battery case's rungv runs: its own $HOME, $TMPDIR and
// working directory, each empty, so that anything it writes outside the
// cache shows.
type scratch struct {
	home, tmp, cwd string
	// extraEnv is added to the environment of the next runs.
	extraEnv []string
}

func newScratch(t *testing.T) *scratch {
	t.Helper()
	root := t.TempDir()
	s := &scratch{home: filepath.Join(root, "home"), tmp: filepath.Join(root, "tmp"), cwd: filepath.Join(root, "cwd")}
	for _, d := range []string{s.home, s.tmp, s.cwd} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *scratch) env() []string {
	var env []string
	for _, e := range os.Environ() {
		k, _, _ := strings.Cut(e, "=")
		switch k {
		case "HOME", "TMPDIR", "GVX_CACHE", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR":
			continue
		}
		env = append(env, e)
	}
	return append(append(env, "HOME="+s.home, "TMPDIR="+s.tmp), s.extraEnv...)
}

// leftovers lists what a run left in the scratch directories, and empties
// them for the next run.
func (s *scratch) leftovers() []string {
	var bad []string
	for _, d := range []string{s.home, s.tmp, s.cwd} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			bad = append(bad, filepath.Join(d, e.Name()))
			os.RemoveAll(filepath.Join(d, e.Name()))
		}
	}
	return bad
}

// runResult is one run of rungv.
type runResult struct {
	stdout, stderr string
	code           int
	hung           bool
	took           time.Duration
}

// run runs rungv with args in s, killing it at hangDeadline.
func (s *scratch) run(args ...string) runResult {
	r, err := runRungv(s.env(), s.cwd, args...)
	if err != nil {
		r.code = -1
		r.stderr += "\n(starting rungv: " + err.Error() + ")"
	}
	return r
}

// runRungv runs rungv with args, in env and dir (nil and "": this
// process's), killing it at hangDeadline. The error is set only when rungv
// could not be started.
func runRungv(env []string, dir string, args ...string) (runResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), hangDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, rungvBinary, args...)
	cmd.Env, cmd.Dir = env, dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := runResult{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start), hung: ctx.Err() != nil}
	if cmd.ProcessState != nil {
		r.code = cmd.ProcessState.ExitCode()
		return r, nil
	}
	if r.hung {
		return r, nil
	}
	return r, err
}

var (
	// panicText is what a Go panic or fatal runtime error prints.
	panicText = regexp.MustCompile(`(?m)^(panic: |fatal error: )|\[signal SIG|runtime error:`)
	// traceText is a stack trace's lines.
	traceText = regexp.MustCompile(`goroutine \d+ \[|\.go:\d+|runtime/debug\.Stack`)
	// adviceText is how rungv's errors say what to do.
	adviceText = regexp.MustCompile(`(?i)\b(does not take|instead|needs|rebuild|save it again|get the image again|give|use|pass|pick|write|want|add|drop|remove|install|check|try|is it|must be|should|set|name|create|expected|at most|at least|only)\b`)
)

// classify says what r was: a run that ended with 0 was accepted; an error
// is clear if it is one short "rungv: …" message, with no usage text, that
// says each of want and says what to do.
func classify(r runResult, want []string) (string, string) {
	if o, bad := crashed(r); bad {
		return o, crashDetail(o, r)
	}
	if r.code == 0 {
		return outAccepted, ""
	}
	msg := strings.TrimSpace(r.stderr)
	var why []string
	if !strings.HasPrefix(msg, "rungv: ") {
		why = append(why, "does not start with \"rungv: \"")
	}
	if n := strings.Count(msg, "\n") + 1; n > 4 {
		why = append(why, fmt.Sprintf("is %d lines long", n))
	}
	if strings.Contains(msg, "Usage:") || strings.Contains(msg, "Flags:") {
		why = append(why, "dumps the usage")
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			why = append(why, fmt.Sprintf("does not say %q", w))
		}
	}
	if !adviceText.MatchString(msg) {
		why = append(why, "does not say what to do")
	}
	if r.code != 1 {
		why = append(why, fmt.Sprintf("exits %d, not 1", r.code))
	}
	if len(why) > 0 {
		return outUnclear, fmt.Sprintf("%s: %q", strings.Join(why, ", "), truncate(msg, 1500))
	}
	return outClear, ""
}

// crashed classifies what no case may do: hang, panic, or print a trace.
func crashed(r runResult) (string, bool) {
	switch {
	case r.hung:
		return outHang, true
	case panicText.MatchString(r.stderr):
		return outPanic, true
	case traceText.MatchString(r.stderr):
		return outTrace, true
	}
	return "", false
}

// crashDetail is what a report shows of a crashed run.
func crashDetail(o string, r runResult) string {
	if o == outHang {
		return fmt.Sprintf("still running after %s; stderr %q", hangDeadline, truncate(r.stderr, 400))
	}
	return truncate(r.stderr, 2000)
}

// tally counts a battery's outcomes for its battery.Table.
type tally struct {
	tried, clear, accepted, unclear, traces, panics, hangs, effects int
	slowest                                                         time.Duration
	slowestName                                                     string
	// effectsUnchecked: some case did not look for host effects.
	effectsUnchecked bool
}

// add counts one case; effects < 0 says the case did not look for host
// effects.
func (c *tally) add(name, outcome string, took time.Duration, effects int) {
	c.tried++
	if effects < 0 {
		c.effectsUnchecked = true
	} else {
		c.effects += effects
	}
	switch outcome {
	case outAccepted:
		c.accepted++
	case outClear:
		c.clear++
	case outUnclear:
		c.unclear++
	case outTrace:
		c.traces++
	case outPanic:
		c.panics++
	case outHang:
		c.hangs++
	}
	if took > c.slowest {
		c.slowest, c.slowestName = took, name
	}
}

// record counts one case that does not look for host effects, logging a
// clear or accepted one and failing t on any other.
func (c *tally) record(t *testing.T, name, outcome string, took time.Duration, detail string) {
	t.Helper()
	c.add(name, outcome, took, -1)
	switch outcome {
	case outClear, outAccepted:
		t.Logf("%s: %s in %v: %s", name, outcome, took.Round(time.Millisecond), truncate(detail, 300))
	default:
		t.Errorf("%s: %s after %v: %s", name, outcome, took.Round(time.Millisecond), detail)
	}
}

func (c *tally) table(t *testing.T, title string) {
	t.Helper()
	effects := strconv.Itoa(c.effects)
	if c.effectsUnchecked {
		effects = "not checked"
	}
	battery.Table(t, title,
		[]string{"cases tried", "clear errors", "accepted or correct (as docker does, safely)", "hangs", "panics", "traces", "unclear errors", "slowest case (ms)", "host effects outside the cache"},
		[]string{strconv.Itoa(c.tried), strconv.Itoa(c.clear), strconv.Itoa(c.accepted), strconv.Itoa(c.hangs), strconv.Itoa(c.panics), strconv.Itoa(c.traces), strconv.Itoa(c.unclear),
			fmt.Sprintf("%d (%s)", c.slowest.Milliseconds(), c.slowestName), effects})
}

// treeListing lists every path under root with its type, mode and size,
// to compare before and after a run.
func treeListing(root string) []string {
	var l []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			l = append(l, p+": "+err.Error())
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		size := info.Size()
		if d.IsDir() {
			size = 0
		}
		l = append(l, fmt.Sprintf("%s %v %d", p, info.Mode(), size))
		return nil
	})
	slices.Sort(l)
	return l
}

// hostileFiles lists what under root no pull or failed run may leave on the
// host: device nodes, FIFOs, sockets, set-ID or world-writable files, and
// symlinks.
func hostileFiles(root string) []string {
	var bad []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		m := info.Mode()
		if m&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeSymlink|fs.ModeSetuid|fs.ModeSetgid) != 0 || (!d.IsDir() && m.Perm()&0o002 != 0) {
			bad = append(bad, fmt.Sprintf("%s (%v)", p, m))
		}
		return nil
	})
	return bad
}
