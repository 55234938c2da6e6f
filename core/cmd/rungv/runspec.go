package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"

	"z.gfire.dev/gvx/core/host"
	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/internal/hostfile"
	"z.gfire.dev/gvx/core/spec"
)

// processSpec is a command resolved against an image's config, the way
// `docker run` resolves it.
type processSpec struct {
	Argv []string
	Env  []string
	Cwd  string
	User string // as given: "", "uid[:gid]" or "name[:group]"
}

// errNoCommand is resolveCommand's error for an image with neither
// Entrypoint nor Cmd run without a command: keep-alive and restore run no
// command, and forgive it.
var errNoCommand = errors.New("no command: the image has no Entrypoint or Cmd; give one after the image name (or as the spec's cmd)")

// resolveCommand merges the image config with the spec, as docker run
// does: an entrypoint replaces the image's and drops its Cmd; cmd replaces
// the image's Cmd; env overrides the image's variables by name. For
// errNoCommand the process's Env, Cwd and User are still set: execs take
// their defaults from them.
func resolveCommand(cfg image.Config, sp *spec.Sandbox) (processSpec, error) {
	ps := processSpec{Env: host.MergeEnv(cfg.Env, sp.Env), Cwd: sp.Workdir, User: sp.User}
	if ps.Cwd == "" {
		ps.Cwd = cfg.WorkingDir
	}
	if ps.Cwd == "" {
		ps.Cwd = "/"
	}
	if !path.IsAbs(ps.Cwd) {
		return processSpec{}, &fieldError{"workdir", "", fmt.Sprintf("the image's WorkingDir %q is not an absolute path; give one, or rebuild the image", ps.Cwd), nil}
	}
	if ps.User == "" {
		ps.User = cfg.User
	}
	if sp.Entrypoint != nil {
		ps.Argv = append(append(ps.Argv, *sp.Entrypoint...), sp.Cmd...)
	} else {
		ps.Argv = append(ps.Argv, cfg.Entrypoint...)
		if len(sp.Cmd) > 0 {
			ps.Argv = append(ps.Argv, sp.Cmd...)
		} else {
			ps.Argv = append(ps.Argv, cfg.Cmd...)
		}
	}
	if len(ps.Argv) == 0 {
		return ps, errNoCommand
	}
	return ps, nil
}

// expandEnvEntry turns an -e or --env-file entry into KEY=VALUE: a bare
// KEY takes the host's value, and is dropped (false) if the host has none,
// as docker does.
func expandEnvEntry(e string) (string, bool, error) {
	key, _, hasValue := strings.Cut(e, "=")
	switch {
	case key == "":
		// docker run: "invalid environment variable: =x".
		return "", false, errors.New("invalid environment variable: it has no name; write NAME=VALUE, or NAME to copy the host's")
	case strings.ContainsAny(key, " \t"):
		return "", false, fmt.Errorf("invalid environment variable: the name %q contains whitespace; remove it", key)
	case hasValue:
		return e, true, nil
	}
	v, ok := os.LookupEnv(key)
	return key + "=" + v, ok, nil
}

// readEnvFile reads a docker-style env file: KEY=VALUE or KEY lines,
// blank lines and #-comments ignored.
func readEnvFile(path string) ([]string, error) {
	if path == "" {
		return nil, errors.New("--env-file \"\": give the path of a file of NAME=VALUE lines")
	}
	f, err := hostfile.Open(path, os.O_RDONLY, hostfile.Regular)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("--env-file %s: the file does not exist; give a file of NAME=VALUE lines", path)
	case errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("--env-file %s: %w; give a file rungv may read", path, err)
	case err != nil:
		return nil, fmt.Errorf("--env-file %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("--env-file %s: %w", path, err)
	}
	var entries []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1) // no line is too long
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimLeft(sc.Text(), " \t")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kv, ok, err := expandEnvEntry(line)
		if err != nil {
			return nil, fmt.Errorf("--env-file %s:%d: %w", path, n, err)
		}
		if ok {
			entries = append(entries, kv)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--env-file %s: %w", path, err)
	}
	return entries, nil
}

// errSizeTooLarge is parseBytes' error for a size of 2^63 bytes or more,
// past what the C ABI's and Python's int64 sizes carry.
var errSizeTooLarge = errors.New("is 8 EiB or more, past any size")

// sizeGrammar is gvx's one way to write a size, shared with Python's
// parse_size through core/testdata/sizes.json: a decimal number, then
// optionally k, m, g or t (binary units, case-insensitive, "i" allowed
// after the unit) and "b". No signs, exponents or hexadecimal.
var sizeGrammar = regexp.MustCompile(`(?i)^\s*([0-9]+(?:\.[0-9]+)?)\s*(?:([kmgt])i?)?b?\s*$`)

// parseBytes parses a size in sizeGrammar: 512m, 2g, 1048576, 64k, 1.5GiB.
// An empty string is 0 (unset).
func parseBytes(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	m := sizeGrammar.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not a size; write a number with an optional unit: 512m, 2g", s)
	}
	v, ok := new(big.Rat).SetString(m[1])
	if !ok {
		return 0, fmt.Errorf("%q is not a size; write a number with an optional unit: 512m, 2g", s)
	}
	shift := map[string]uint{"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[strings.ToLower(m[2])]
	v.Mul(v, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), shift)))
	n := new(big.Int).Quo(v.Num(), v.Denom())
	if n.Cmp(new(big.Int).Lsh(big.NewInt(1), 63)) >= 0 {
		return 0, fmt.Errorf("%q %w; write a size such as 512m or 2g", s, errSizeTooLarge)
	}
	return n.Uint64(), nil
}

// parseCPUList parses a CPU list as docker run --cpuset-cpus takes it:
// numbers and ranges, comma-separated ("0-3,6"). Repeated CPUs count once.
// It checks the syntax only; checkCPUs checks the CPUs against those this
// process may run on. A range is expanded only up to the first CPU no
// process can run on, which checkCPUs refuses, so that 0-2147483647 costs
// nothing.
func parseCPUList(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	seen := make(map[int]bool)
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		first, err1 := strconv.Atoi(lo)
		last, err2 := first, error(nil)
		if isRange {
			last, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || first < 0 || last < first {
			return nil, fmt.Errorf("%q is not a CPU list; write CPU numbers and ranges such as 0-3,6", s)
		}
		for c := first; c <= last; c++ {
			if !seen[c] {
				seen[c] = true
				cpus = append(cpus, c)
			}
			if c >= cpuSetSize {
				break
			}
		}
	}
	return cpus, nil
}
