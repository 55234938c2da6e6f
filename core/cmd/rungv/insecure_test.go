package main

import (
	"strings"
	"testing"

	"z.gfire.dev/gvx/core/internal/testregistry"
)

// TestRunPullsFromAPlainHTTPRegistryWithInsecure runs an image that must
// first be pulled from a registry that speaks plain HTTP: refused, saying
// to pass --insecure, until run is given --insecure (as pull is, and as the
// SDK passes Config.Insecure).
func TestRunPullsFromAPlainHTTPRegistryWithInsecure(t *testing.T) {
	ref := testregistry.ServeTestImage(t, testregistry.PlainHTTPAddr)

	cache := t.TempDir()
	_, stderr, code := rungv(t, cache, "run", "-q", ref, "echo", "pulled")
	if code == 0 || !strings.Contains(stderr, "--insecure") {
		t.Fatalf("run from a plain-HTTP registry without --insecure: exit %d, stderr %q; want a failure that says to pass --insecure", code, stderr)
	}
	stdout, stderr, code := rungv(t, cache, "run", "-q", "--insecure", ref, "echo", "pulled")
	if code != 0 || stdout != "pulled\n" {
		t.Fatalf("run --insecure: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
