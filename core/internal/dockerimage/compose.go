package dockerimage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ComposePluginPath is where the Compose v2 plugin is installed in the
// image; the docker CLI finds its plugins there.
const ComposePluginPath = "usr/libexec/docker/cli-plugins/docker-compose"

// buildCompose builds the Compose v2 CLI plugin r.ComposeVersion from the
// Go module proxy into dst. The module's source is downloaded and built
// in a throw-away directory under work with its own go.mod and go.sum, so
// nothing of it reaches gvx's module. The log goes to logPath.
func buildCompose(ctx context.Context, r *Recipe, work, dst, logPath string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return errors.New("the Go toolchain is not on PATH")
	}
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	// The user's module cache is used (and filled), as `go install`
	// would; gvx's go.mod and go.sum are never involved.
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED=0", "GOTOOLCHAIN=local", "GOWORK=off")
	mod := composeModule + "@" + r.ComposeVersion
	dl := exec.CommandContext(ctx, goBin, "mod", "download", "-json", mod)
	dl.Dir, dl.Env, dl.Stderr = work, env, log
	out, err := dl.Output()
	if err != nil {
		return fmt.Errorf("downloading %s from the Go module proxy: %w (log: %s)", mod, err, logPath)
	}
	var info struct{ Dir string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		return fmt.Errorf("go mod download %s printed no source directory: %s", mod, strings.TrimSpace(string(out)))
	}
	// The module cache is read-only; build in a writable copy so the
	// module's own go.mod (with its replace directives) applies.
	src := filepath.Join(work, "compose-src")
	if err := exec.CommandContext(ctx, "cp", "-r", info.Dir, src).Run(); err != nil {
		return fmt.Errorf("copying the Compose source: %w", err)
	}
	if err := exec.CommandContext(ctx, "chmod", "-R", "u+w", src).Run(); err != nil {
		return err
	}
	ldflags := "-s -w -X " + composeModule + "/internal.Version=" + r.ComposeVersion
	build := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-ldflags", ldflags, "-o", dst, "./cmd")
	build.Dir, build.Env, build.Stdout, build.Stderr = src, env, log, log
	if err := build.Run(); err != nil {
		return fmt.Errorf("building Compose %s: %w (log: %s)", r.ComposeVersion, err, logPath)
	}
	return nil
}

// composeModule is Compose v2's Go module.
const composeModule = "github.com/docker/compose/v2"
