// Package gvx is the Go SDK of gvx: isolated, Docker-capable sandboxes for
// training and evaluating coding agents.
//
// A sandbox is a rungv child process running gVisor's Sentry; it never
// runs inside the caller's process. New starts the child and connects to
// it over an inherited socket with gvx's control protocol (core/control).
// The child dies with the caller: it gets SIGKILL if the caller's process
// dies, and stops when the control connection goes away.
//
//	sb, err := gvx.New(ctx, gvx.Config{Sandbox: spec.Sandbox{Image: "oci:./busybox:latest", KeepAlive: true}})
//	if err != nil { … }
//	defer sb.Close()
//	res, err := sb.Exec(ctx, []string{"sh", "-c", "echo hi"}, nil)
//	fmt.Printf("%d %s", res.ExitCode, res.Stdout)
package gvx

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/spec"
)

// Config describes a sandbox and how this caller starts it.
//
// The sandbox itself is its spec.Sandbox, embedded, the one description
// that Python, the C ABI and rungv share: its fields (Image, Cmd, Env,
// Memory, Ports, Mounts, ...) are the Config's, and so are their JSON keys,
// which is why the spec is embedded rather than a named field: the JSON a
// Python caller sends to gvx_sandbox_new is a Config, flat, as it is here.
// The rest of the Config says how to start it from this process: which
// rungv, which image cache, and where the sandbox's own streams go.
//
// The spec's Spin left nil (the default) lets New decide: the sandbox
// spins unless the host's CPUs are oversubscribed as it starts (twice as
// many threads running or waiting for a CPU, besides the caller, as there
// are CPUs) or more than twice as many sandboxes as there are CPUs already
// spin on this host, the new one included, whichever processes started
// them. Spinning makes a lone busy sandbox's system calls several times
// faster; with more busy sandboxes than CPUs the spinners take the CPU
// that the others need, for the whole life of the sandbox (figures in
// benchmarks/README). Twice, not once: a sandbox that waits in a warm pool
// is alive but not busy, and an environment with a pool of two on 2 CPUs
// should still spin. $GVX_SPIN, if set, decides for the sandboxes New
// would let spin.
type Config struct {
	spec.Sandbox

	// Stdin, Stdout and Stderr are the init command's streams (rungv's).
	// Nil: no input, output discarded (the last 64 KiB of stderr is kept
	// for error messages either way).
	Stdin  io.Reader `json:"-"`
	Stdout io.Writer `json:"-"`
	Stderr io.Writer `json:"-"`

	// Rungv is the rungv binary. Empty: $GVX_RUNGV, then "rungv" next to
	// the running executable, then $PATH.
	Rungv string `json:"rungv,omitempty"`
	// Cache is the image cache directory. Empty: $GVX_CACHE or
	// ~/.cache/gvx.
	Cache string `json:"cache,omitempty"`
	// Insecure allows plain-HTTP registries when pulling Image.
	Insecure bool `json:"insecure,omitempty"`

	// extraArgs are added to `rungv run`'s flags (tests): runner flags
	// only, as the spec describes the sandbox.
	extraArgs []string
}

// check checks the sandbox c describes (spec.Sandbox.Validate, whose
// errors name the spec's fields as its JSON does) and returns the spec
// rungv is to get: c's own, which New may still complete (Spin).
func (c *Config) check() (spec.Sandbox, error) {
	sp := c.Sandbox
	if err := sp.Validate(); err != nil {
		return sp, fmt.Errorf("gvx: %w", err)
	}
	return sp, nil
}

// runArgs are rungv's arguments for a sandbox whose control socket is
// inherited as descriptor controlFD, the pipe for its exit status as the
// next one and its spec (specFile) as the one after.
func (c *Config) runArgs(controlFD int) []string {
	var a []string
	if c.Cache != "" {
		a = append(a, "--cache", c.Cache)
	}
	// The exit status descriptor: see Sandbox.exitCode.
	a = append(a, "run", "--quiet", "--control", "fd:"+strconv.Itoa(controlFD),
		"--exit-status-fd", strconv.Itoa(controlFD+1), "--spec", "fd:"+strconv.Itoa(controlFD+2))
	if c.Stdin != nil {
		a = append(a, "--interactive")
	}
	if c.Insecure {
		a = append(a, "--insecure")
	}
	return append(a, c.extraArgs...)
}

// specFile returns a sealed memfd that holds sp's JSON, for rungv's --spec
// fd:N. A memfd, not a pipe: the spec is there whole before rungv starts,
// whatever its size, with nothing left to write it (a pipe holds 64 KiB
// before its writer blocks) and no writer to fail if rungv dies early;
// the seals keep it as written while rungv reads it.
func specFile(sp *spec.Sandbox) (*os.File, error) {
	b, err := json.Marshal(sp)
	if err != nil {
		return nil, fmt.Errorf("gvx: encoding the sandbox spec: %w", err)
	}
	fd, err := unix.MemfdCreate("gvx-spec", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, withHostLimitHint("creating the memfd for the sandbox spec", err)
	}
	f := os.NewFile(uintptr(fd), "gvx-spec")
	if _, err = f.Write(b); err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE)
	}
	if err == nil {
		// rungv reads from where the shared offset stands.
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("gvx: writing the sandbox spec to a memfd: %w", err)
	}
	return f, nil
}

// rungvPath finds the rungv binary.
func (c *Config) rungvPath() (string, error) {
	if c.Rungv != "" {
		return c.Rungv, nil
	}
	if p := os.Getenv("GVX_RUNGV"); p != "" {
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "rungv")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("rungv")
	if err != nil {
		return "", errors.New("gvx: rungv not found: set Config.Rungv or $GVX_RUNGV, or put rungv on PATH (make builds build/rungv)")
	}
	return p, nil
}
