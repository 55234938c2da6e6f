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

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/host"
	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/internal/hostfile"
	"z.gfire.dev/gvx/core/sentry"
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
// Entrypoint nor Cmd run without a COMMAND: --keep-alive and --restore run
// no command, and forgive it.
var errNoCommand = errors.New("no command: the image has no Entrypoint or Cmd; give one after the image name")

// processDefaults are what run's process flags (-e, --env-file, -w, -u)
// set for the sandbox's processes, init's and execs' alike, checked when
// the flags are parsed so that a bad value is reported with its flag,
// before anything is pulled or booted.
type processDefaults struct {
	Env     []string // KEY=VALUE, the --env-file entries then the -e ones
	Workdir string   // "" (the image's) or an absolute path
	User    string   // "" (the image's) or a valid name|uid[:group|gid]
}

// processFlags checks and reads run's process flags.
func (f *runFlags) processFlags() (processDefaults, error) {
	var d processDefaults
	for _, path := range f.envFiles {
		entries, err := readEnvFile(path)
		if err != nil {
			return d, err
		}
		d.Env = host.MergeEnv(d.Env, entries)
	}
	for _, e := range f.env {
		kv, ok, err := expandEnvEntry(e)
		if err != nil {
			return d, fmt.Errorf("--env %q: %w", e, err)
		}
		if ok {
			d.Env = host.MergeEnv(d.Env, []string{kv})
		}
	}
	if f.workdir != "" {
		if err := checkWorkdir(f.workdir); err != nil {
			return d, fmt.Errorf("--workdir %.64q: %w", f.workdir, err)
		}
	}
	if f.user != "" {
		if err := host.CheckUser(f.user); err != nil {
			return d, fmt.Errorf("--user: %w", err)
		}
	}
	d.Workdir, d.User = f.workdir, f.user
	return d, nil
}

// checkWorkdir checks a working directory a flag names against what Linux
// takes of a path; whether it can be a directory only the guest knows.
func checkWorkdir(dir string) error {
	if !path.IsAbs(dir) {
		// As docker run words it.
		return errors.New("the working directory is invalid, it needs to be an absolute path; give one such as --workdir /app")
	}
	if len(dir) >= unix.PathMax {
		return fmt.Errorf("the path is %d bytes, more than the %d Linux takes (PATH_MAX); give a shorter one", len(dir), unix.PathMax-1)
	}
	for _, name := range strings.Split(dir, "/") {
		if len(name) > unix.NAME_MAX {
			return fmt.Errorf("the path has a name of %d bytes, more than the %d Linux takes (NAME_MAX); give a shorter one", len(name), unix.NAME_MAX)
		}
	}
	return nil
}

// resolveCommand merges the image config with the command line:
// --entrypoint replaces the image's entrypoint and drops its Cmd; CMD
// arguments replace the image's Cmd; the -e and --env-file entries in d
// override the image's variables by name. For errNoCommand the spec's Env,
// Cwd and User are still set: execs take their defaults from them.
func resolveCommand(cfg image.Config, entrypoint *string, args []string, d processDefaults) (processSpec, error) {
	spec := processSpec{Env: host.MergeEnv(cfg.Env, d.Env), Cwd: d.Workdir, User: d.User}
	if spec.Cwd == "" {
		spec.Cwd = cfg.WorkingDir
	}
	if spec.Cwd == "" {
		spec.Cwd = "/"
	}
	if !path.IsAbs(spec.Cwd) {
		return processSpec{}, fmt.Errorf("the image's WorkingDir %q is not an absolute path; give one with --workdir /PATH, or rebuild the image", spec.Cwd)
	}
	if spec.User == "" {
		spec.User = cfg.User
	}
	if entrypoint != nil {
		if *entrypoint != "" {
			spec.Argv = append(spec.Argv, *entrypoint)
		}
		spec.Argv = append(spec.Argv, args...)
	} else {
		spec.Argv = append(spec.Argv, cfg.Entrypoint...)
		if len(args) > 0 {
			spec.Argv = append(spec.Argv, args...)
		} else {
			spec.Argv = append(spec.Argv, cfg.Cmd...)
		}
	}
	if len(spec.Argv) == 0 {
		return spec, errNoCommand
	}
	return spec, nil
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
// Each CPU must be in allowed, the CPUs this process may run on; checking
// while expanding keeps a range such as 0-99999 from being expanded.
func parseCPUList(s string, allowed *unix.CPUSet) ([]int, error) {
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
			if !allowed.IsSet(c) {
				return nil, fmt.Errorf("%q names CPU %d, which this process may not run on: it may use %d CPUs, %s; pick CPUs from those", s, c, allowed.Count(), sentry.FormatCPUSet(allowed))
			}
			if !seen[c] {
				seen[c] = true
				cpus = append(cpus, c)
			}
		}
	}
	return cpus, nil
}
