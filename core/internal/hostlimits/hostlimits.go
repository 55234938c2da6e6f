// Package hostlimits explains a failure to create host processes, threads or
// files by the limit that caused it. Users meet these limits when they scale
// up — hundreds of sandboxes in one process, a container's pids limit — and
// the bare errno ("too many open files", "failed to create new OS thread")
// does not say that every sandbox holds some, or which knob to turn.
package hostlimits

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// TasksPerSandbox is about how many host threads and processes one idle
// sandbox runs: rungv's Go threads (8) and its systrap stub processes (7),
// counted with ps -eLf.
const TasksPerSandbox = 15

// FilesPerSandbox is how many files a live sandbox keeps open in the process
// that started it: its control socket, a pidfd and the pipe of rungv's
// stderr (one more when its stdout goes to a writer that is not a file).
const FilesPerSandbox = 3

// FileHint explains EMFILE in a process that starts sandboxes.
func FileHint() string {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil {
		lim = unix.Rlimit{}
	}
	return fmt.Sprintf("this process has as many files open as its RLIMIT_NOFILE allows (%d, hard limit %d), "+
		"and each live sandbox keeps %d or %d of them: raise the limit (ulimit -n; in Python "+
		"resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))), close sandboxes you are done with, "+
		"or spread them over more processes", lim.Cur, lim.Max, FilesPerSandbox, FilesPerSandbox+1)
}

// TaskHint explains a refused process or thread: by a pids cgroup of this
// process that is full, else by a finite RLIMIT_NPROC of an unprivileged
// user; "" when neither applies.
//
// It reads files, so a locked rungv must not call it.
func TaskHint() string {
	if cg, max, cur, ok := FullPidsCgroup("/proc/self/cgroup", "/sys/fs/cgroup"); ok {
		return fmt.Sprintf("the pids cgroup %s allows %d tasks and holds %d, and each sandbox runs about %d "+
			"(rungv's threads and its stub processes): raise its pids.max (a container's --pids-limit, "+
			"a pod's pid limit) or run fewer sandboxes", cg, max, cur, TasksPerSandbox)
	}
	var lim unix.Rlimit
	if os.Geteuid() != 0 && unix.Getrlimit(unix.RLIMIT_NPROC, &lim) == nil && lim.Cur != unix.RLIM_INFINITY {
		return fmt.Sprintf("this user may run %d processes and threads (RLIMIT_NPROC, ulimit -u), and each "+
			"sandbox runs about %d: raise the limit or run fewer sandboxes", lim.Cur, TasksPerSandbox)
	}
	return ""
}

// FullPidsCgroup finds the pids cgroup, of the one this process is in (as
// procCgroup lists it) and its ancestors, whose task count has reached its
// pids.max, in the cgroup file systems mounted at root: root/pids/PATH for
// cgroup v1, root/PATH for v2. It leaves two tasks of slack, as some may
// have exited since the refusal.
func FullPidsCgroup(procCgroup, root string) (cg string, max, cur int, ok bool) {
	data, err := os.ReadFile(procCgroup)
	if err != nil {
		return "", 0, 0, false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// hierarchy-ID:controllers:path
		fields := strings.SplitN(line, ":", 3)
		if len(fields) != 3 {
			continue
		}
		var base string
		switch {
		case fields[0] == "0" && fields[1] == "":
			base = root
		case hasController(fields[1], "pids"):
			base = path.Join(root, "pids")
		default:
			continue
		}
		for dir := path.Clean(fields[2]); ; dir = path.Dir(dir) {
			max, errMax := readCount(path.Join(base, dir, "pids.max"))
			cur, errCur := readCount(path.Join(base, dir, "pids.current"))
			if errMax == nil && errCur == nil && cur+2 >= max {
				return path.Join(base, dir), max, cur, true
			}
			if dir == "/" || dir == "." {
				break
			}
		}
	}
	return "", 0, 0, false
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readCount reads a file holding one decimal number; "max" is an error.
func readCount(file string) (int, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}
