package gvx

import (
	"context"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/testregistry"
	"z.gfire.dev/gvx/core/spec"
)

// TestInsecurePullsFromAPlainHTTPRegistry starts a sandbox whose image must
// first be pulled from a registry that speaks plain HTTP: New fails, saying
// to pass --insecure, until Config.Insecure is set.
func TestInsecurePullsFromAPlainHTTPRegistry(t *testing.T) {
	ref := testregistry.ServeTestImage(t, testregistry.PlainHTTPAddr)

	cfg := Config{Sandbox: spec.Sandbox{Image: ref, KeepAlive: true}, Rungv: rungvBin, Cache: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if sb, err := New(ctx, cfg); err == nil {
		sb.Close()
		t.Fatal("New pulled from a plain-HTTP registry without Insecure")
	} else if !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("New without Insecure: %v; want an error that says to pass --insecure", err)
	}
	cfg.Insecure = true
	sb := newSandbox(t, cfg)
	if res := sh(t, sb, "echo pulled", nil); string(res.Stdout) != "pulled\n" {
		t.Fatalf("exec in the pulled image: %+v", res)
	}
}
