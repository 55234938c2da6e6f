package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

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

// resolveCommand merges the image config with the command line:
// --entrypoint replaces the image's entrypoint and drops its Cmd; CMD
// arguments replace the image's Cmd; -e and --env-file entries override the
// image's variables by name.
func resolveCommand(cfg image.Config, entrypoint *string, args []string, env []string, envFiles []string, workdir, user string) (processSpec, error) {
	var argv []string
	if entrypoint != nil {
		if *entrypoint != "" {
			argv = append(argv, *entrypoint)
		}
		argv = append(argv, args...)
	} else {
		argv = append(argv, cfg.Entrypoint...)
		if len(args) > 0 {
			argv = append(argv, args...)
		} else {
			argv = append(argv, cfg.Cmd...)
		}
	}
	if len(argv) == 0 {
		return processSpec{}, fmt.Errorf("no command: the image has no Entrypoint or Cmd; give one after the image name")
	}
	merged := append([]string(nil), cfg.Env...)
	for _, f := range envFiles {
		entries, err := readEnvFile(f)
		if err != nil {
			return processSpec{}, err
		}
		merged = mergeEnv(merged, entries)
	}
	extra, err := expandEnv(env)
	if err != nil {
		return processSpec{}, err
	}
	merged = mergeEnv(merged, extra)
	cwd := workdir
	if cwd == "" {
		cwd = cfg.WorkingDir
	}
	if cwd == "" {
		cwd = "/"
	}
	if !strings.HasPrefix(cwd, "/") {
		return processSpec{}, fmt.Errorf("working directory %q is not absolute", cwd)
	}
	if user == "" {
		user = cfg.User
	}
	return processSpec{Argv: argv, Env: merged, Cwd: cwd, User: user}, nil
}

// expandEnv turns -e entries into KEY=VALUE: a bare KEY takes the host's
// value and is dropped if the host has none, as docker does.
func expandEnv(entries []string) ([]string, error) {
	var out []string
	for _, e := range entries {
		key, _, hasValue := strings.Cut(e, "=")
		if key == "" {
			return nil, fmt.Errorf("environment entry %q has no name", e)
		}
		if hasValue {
			out = append(out, e)
		} else if v, ok := os.LookupEnv(key); ok {
			out = append(out, key+"="+v)
		}
	}
	return out, nil
}

// readEnvFile reads a docker-style env file: KEY=VALUE or KEY lines,
// blank lines and #-comments ignored.
func readEnvFile(path string) ([]string, error) {
	f, err := hostfile.Open(path, os.O_RDONLY, hostfile.Regular)
	if err != nil {
		return nil, fmt.Errorf("--env-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("--env-file: %w", err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimLeft(sc.Text(), " \t")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(strings.SplitN(line, "=", 2)[0], " \t") {
			return nil, fmt.Errorf("--env-file %s:%d: variable name %q contains whitespace", path, n, strings.SplitN(line, "=", 2)[0])
		}
		lines = append(lines, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--env-file %s: %w", path, err)
	}
	return expandEnv(lines)
}

// mergeEnv returns base with each entry of override replacing the entry of
// the same name, or appended.
func mergeEnv(base, override []string) []string {
	out := append([]string(nil), base...)
	index := map[string]int{}
	for i, e := range out {
		k, _, _ := strings.Cut(e, "=")
		index[k] = i
	}
	for _, e := range override {
		k, _, _ := strings.Cut(e, "=")
		if i, ok := index[k]; ok {
			out[i] = e
		} else {
			index[k] = len(out)
			out = append(out, e)
		}
	}
	return out
}

// guestUser is a user resolved against the image's /etc/passwd and
// /etc/group.
type guestUser struct {
	UID, GID uint32
	Home     string
}

// lookupUser resolves "uid[:gid]" or "name[:group]" (either part numeric or
// a name) against passwd and group file contents, which may be empty.
func lookupUser(spec string, passwd, group []byte) (guestUser, error) {
	if spec == "" {
		spec = "0"
	}
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	u := guestUser{Home: "/"}
	entries := parseColonFile(passwd, 7)
	if id, err := strconv.ParseUint(userPart, 10, 32); err == nil {
		// A numeric user without a passwd entry gets gid 0, as in docker.
		u.UID = uint32(id)
		for _, f := range entries {
			if f[2] == userPart {
				gid, _ := strconv.ParseUint(f[3], 10, 32)
				u.GID, u.Home = uint32(gid), f[5]
				break
			}
		}
	} else {
		found := false
		for _, f := range entries {
			if f[0] == userPart {
				uid, err1 := strconv.ParseUint(f[2], 10, 32)
				gid, err2 := strconv.ParseUint(f[3], 10, 32)
				if err1 != nil || err2 != nil {
					return guestUser{}, fmt.Errorf("user %q: malformed /etc/passwd entry in the image", userPart)
				}
				u.UID, u.GID, u.Home = uint32(uid), uint32(gid), f[5]
				found = true
				break
			}
		}
		if !found {
			return guestUser{}, fmt.Errorf("user %q is not in the image's /etc/passwd; use a numeric uid[:gid] or a user the image has", userPart)
		}
	}
	if hasGroup {
		if id, err := strconv.ParseUint(groupPart, 10, 32); err == nil {
			u.GID = uint32(id)
		} else {
			found := false
			for _, f := range parseColonFile(group, 4) {
				if f[0] == groupPart {
					gid, err := strconv.ParseUint(f[2], 10, 32)
					if err != nil {
						return guestUser{}, fmt.Errorf("group %q: malformed /etc/group entry in the image", groupPart)
					}
					u.GID, found = uint32(gid), true
					break
				}
			}
			if !found {
				return guestUser{}, fmt.Errorf("group %q is not in the image's /etc/group; use a numeric gid", groupPart)
			}
		}
	}
	if u.Home == "" {
		u.Home = "/"
	}
	return u, nil
}

// parseColonFile splits passwd/group-style lines into at least n fields.
func parseColonFile(b []byte, n int) [][]string {
	var out [][]string
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < n {
			continue
		}
		out = append(out, f)
	}
	return out
}

// errSizeTooLarge is parseBytes' error for a size of 2^64 bytes or more.
var errSizeTooLarge = errors.New("is 16 EiB or more, past any size")

// parseBytes parses docker-style sizes: 512m, 2g, 1048576, 64k (binary
// units).
func parseBytes(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "b")
	mult := uint64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult != 1 {
			t = t[:len(t)-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a size; write a number with an optional unit: 512m, 2g", s)
	}
	if v*float64(mult) >= 1<<64 {
		return 0, fmt.Errorf("%q %w; write a size such as 512m or 2g", s, errSizeTooLarge)
	}
	return uint64(v * float64(mult)), nil
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
