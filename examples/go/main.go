// Command go-episode runs one agent-style episode with the Go SDK: a fresh
// sandbox on an image, a few commands, a file written and read back, and
// the sandbox gone at the end.
//
//	go run ./examples/go [IMAGE]
//
// IMAGE defaults to the default busybox image `make demo` builds.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"z.gfire.dev/gvx/core/gvx"
	"z.gfire.dev/gvx/core/spec"
)

func main() {
	image := "oci:" + filepath.Join(cacheDir(), "default-image") + ":latest"
	if len(os.Args) > 1 {
		image = os.Args[1]
	}
	if err := episode(image); err != nil {
		fmt.Fprintln(os.Stderr, "episode:", err)
		os.Exit(1)
	}
}

func episode(image string) error {
	ctx := context.Background()
	start := time.Now()
	sb, err := gvx.New(ctx, gvx.Config{Sandbox: spec.Sandbox{
		Image:     image,
		KeepAlive: true,
		Memory:    512 << 20,
		PidsLimit: 256,
	}})
	if err != nil {
		return err
	}
	defer sb.Close()
	fmt.Printf("sandbox %s ready in %v (rungv pid %d)\n", sb.Info().ID, time.Since(start).Round(time.Millisecond), sb.PID())

	task := "#!/bin/sh\necho \"solving in $(pwd) as $(id -un)\"\nexit 3\n"
	if _, err := sb.WriteFile(ctx, "/tmp/task.sh", strings.NewReader(task), gvx.WriteOptions{Mode: 0o755}); err != nil {
		return err
	}
	for _, cmd := range [][]string{
		{"uname", "-a"},
		{"sh", "-c", "ps -o pid,comm | head -5"},
		{"/tmp/task.sh"},
	} {
		res, err := sb.Exec(ctx, cmd, &gvx.ExecOptions{Exec: spec.Exec{Cwd: "/tmp", Timeout: spec.Seconds(10 * time.Second)}})
		if err != nil {
			return err
		}
		fmt.Printf("$ %v  → exit %d in %v\n%s", cmd, res.ExitCode, res.Duration.Round(time.Microsecond), res.Stdout)
	}
	return nil
}

func cacheDir() string {
	if d := os.Getenv("GVX_CACHE"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "gvx")
}
