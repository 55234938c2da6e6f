package lockdown

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Status is the confinement of a process as the host kernel reports it in
// /proc/<pid>/status.
type Status struct {
	NoNewPrivs bool
	// Seccomp is 0 (off), 1 (strict) or 2 (filter).
	Seccomp int
	// CapEff, CapPrm and CapBnd are the effective, permitted and bounding
	// capability sets.
	CapEff, CapPrm, CapBnd uint64
}

// Locked reports whether s is what Install leaves behind: no_new_privs, a
// seccomp filter and no effective or permitted capabilities.
func (s Status) Locked() bool {
	return s.NoNewPrivs && s.Seccomp == 2 && s.CapEff == 0 && s.CapPrm == 0
}

// ReadStatus reads the confinement of process pid. It opens a file, so a
// locked-down process cannot call it on itself.
func ReadStatus(pid int) (Status, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Status{}, fmt.Errorf("lockdown: reading the status of process %d: %w", pid, err)
	}
	return ParseStatus(data)
}

// ParseStatus parses the content of a /proc/<pid>/status file.
func ParseStatus(data []byte) (Status, error) {
	var s Status
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		var err error
		switch key {
		case "NoNewPrivs":
			var n int
			n, err = strconv.Atoi(val)
			s.NoNewPrivs = n == 1
		case "Seccomp":
			s.Seccomp, err = strconv.Atoi(val)
		case "CapEff":
			s.CapEff, err = strconv.ParseUint(val, 16, 64)
		case "CapPrm":
			s.CapPrm, err = strconv.ParseUint(val, 16, 64)
		case "CapBnd":
			s.CapBnd, err = strconv.ParseUint(val, 16, 64)
		default:
			continue
		}
		if err != nil {
			return Status{}, fmt.Errorf("lockdown: bad %s line %q in process status: %w", key, val, err)
		}
		seen++
	}
	if seen != 5 {
		return Status{}, fmt.Errorf("lockdown: process status lacks NoNewPrivs, Seccomp or capability lines (found %d of 5)", seen)
	}
	return s, nil
}
