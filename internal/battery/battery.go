// Package battery holds what the reliability battery's tests share (issue
// 17): `make test` runs each part with cheap counts; `make reliability`
// sets GVX_RELIABILITY_FULL=1 for the full counts and collects every part's
// figures, as markdown tables, in $GVX_RELIABILITY_REPORT. A battery test
// in Go is named TestFault… or TestBattery… so that `make reliability`
// finds it in any package.
package battery

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// FullEnv set to 1 asks for the full counts.
	FullEnv = "GVX_RELIABILITY_FULL"
	// ReportEnv names the file the figures are appended to.
	ReportEnv = "GVX_RELIABILITY_REPORT"
	// SeedEnv repeats a run's random choices.
	SeedEnv = "GVX_RELIABILITY_SEED"
)

// Full reports whether this is a `make reliability` run.
func Full() bool { return os.Getenv(FullEnv) == "1" }

// Count is cheap in `make test` and full in `make reliability`.
func Count(cheap, full int) int {
	if Full() {
		return full
	}
	return cheap
}

// Seed returns $GVX_RELIABILITY_SEED, or a new seed; it logs the seed, so a
// failure can be run again with the same choices.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(SeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", SeedEnv, s, err)
		}
	}
	t.Logf("seed %d (rerun with %s=%d)", seed, SeedEnv, seed)
	return seed
}

// Table logs a markdown table of figures and appends it to
// $GVX_RELIABILITY_REPORT when that is set.
func Table(t testing.TB, title string, header []string, rows ...[]string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n| %s |\n|%s\n", title, strings.Join(header, " | "), strings.Repeat(" --- |", len(header)))
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s |\n", strings.Join(r, " | "))
	}
	t.Log("\n" + b.String())
	if err := appendReport(b.String() + "\n"); err != nil {
		t.Fatalf("writing the reliability report: %v", err)
	}
}

// Skip skips t, saying why in the log and in the report, so that a skipped
// part is not mistaken for a passed one.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if err := appendReport(fmt.Sprintf("%s: skipped, %s\n\n", t.Name(), reason)); err != nil {
		t.Logf("writing the reliability report: %v", err)
	}
	t.Skip("skipped: " + reason)
}

func appendReport(text string) error {
	path := os.Getenv(ReportEnv)
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
