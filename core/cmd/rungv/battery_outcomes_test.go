package main

// How the battery classifies a run and tallies its cases' outcomes.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/internal/battery"
)

// Outcomes of one battery case.
const (
	outAccepted = "accepted"
	outClear    = "clear error"
	outUnclear  = "unclear error"
	outTrace    = "trace"
	outPanic    = "panic"
	outHang     = "hang"
)

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
