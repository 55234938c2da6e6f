package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/store"
)

func TestPullSuggestsIgzipOnlyWhenItWouldHelp(t *testing.T) {
	t.Setenv(image.InflateEnv, "")
	cases := []struct {
		name     string
		took     time.Duration
		inflater string
		hint     bool
	}{
		{"slow, inflated in Go", 5 * time.Second, "go", true},
		{"slow, inflated by igzip", 5 * time.Second, "igzip", false},
		{"slow, no gzip layer", 5 * time.Second, "", false},
		{"quick, inflated in Go", 300 * time.Millisecond, "go", false},
	}
	for _, c := range cases {
		var out bytes.Buffer
		r := &pullReporter{w: &out}
		r.done(store.Event{Kind: store.EventDone, Image: &store.Image{}, Stats: store.PullStats{Duration: c.took, GzipInflater: c.inflater}})
		if got := strings.Contains(out.String(), "isal"); got != c.hint {
			t.Errorf("%s: hint %v, want %v:\n%s", c.name, got, c.hint, out.String())
		}
	}
	// Asked for by name: no advice.
	t.Setenv(image.InflateEnv, "go")
	var out bytes.Buffer
	(&pullReporter{w: &out}).done(store.Event{Kind: store.EventDone, Image: &store.Image{}, Stats: store.PullStats{Duration: time.Minute, GzipInflater: "go"}})
	if strings.Contains(out.String(), "isal") {
		t.Errorf("%s=go still suggests igzip:\n%s", image.InflateEnv, out.String())
	}
}
