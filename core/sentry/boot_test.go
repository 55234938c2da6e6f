package sentry

import (
	"testing"
)

func TestEcho(t *testing.T) {
	s := newSandbox(t, Config{})
	r := startAndWait(t, s, ProcessSpec{Argv: []string{"echo", "hello", "gvx"}})
	if r.status != (ExitStatus{}) || r.stdout != "hello gvx\n" {
		t.Fatalf("echo: status %v, stdout %q, stderr %q; want exit 0 and %q", r.status, r.stdout, r.stderr, "hello gvx\n")
	}
}
