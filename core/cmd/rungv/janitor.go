package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/lockdown"
	"z.gfire.dev/gvx/core/netstack"
)

// The janitor removes files rungv created on the host (unix sockets of
// --control and of ports published with -p unix:…) once rungv is gone,
// however it went:
// after lockdown rungv itself may not unlink anything, and after kill -9 it
// can do nothing at all. The janitor is a second rungv process started
// before lockdown; it waits for the end of a pipe whose write end only
// rungv holds, then removes the files it was given — each only if it is
// still the socket rungv made (same device and inode).
//
// The janitor locks itself down before it waits (lockdown.InstallJanitor):
// no new privileges, no capabilities, and a seccomp filter that allows
// reading its pipe, lstat and unlink by path, and what the Go runtime needs.
// Removing a file needs write and search permission on its directory and,
// in a sticky directory like /tmp, owning the file or the directory; the
// janitor runs as the user who created the socket, so it owns the file and
// held that permission then, unless only CAP_DAC_OVERRIDE gave it (root
// making a socket in another user's directory). Only then does it keep
// that one capability; CAP_FOWNER and the rest are never needed.

const janitorCommand = "__janitor"

// janitorFile is a file to remove and the identity it must still have.
type janitorFile struct {
	path     string
	dev, ino uint64
}

func (j janitorFile) String() string { return fmt.Sprintf("%d:%d:%s", j.dev, j.ino, j.path) }

// startJanitor starts the janitor for files. rungv keeps the returned
// pipe end open for the rest of its life (it is not inherited by anything).
func startJanitor(files []janitorFile) (*os.File, error) {
	if len(files) == 0 {
		return nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	args := []string{janitorCommand}
	for _, f := range files {
		args = append(args, f.String())
	}
	// rungv's descriptors that are not close-on-exec (inherited from its
	// parent) would stay open in the janitor for the rest of its life;
	// it gets only its pipe and /dev/null as stdio.
	if err := closeOnExecFrom(3); err != nil {
		w.Close()
		return nil, fmt.Errorf("starting the janitor that removes rungv's sockets at exit: %w", err)
	}
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.ExtraFiles = []*os.File{r}
	// Out of the terminal's process group: Ctrl-C must not reach it first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("starting the janitor that removes rungv's sockets at exit: %w", err)
	}
	// Never waited for: the janitor outlives rungv by design. Waiting would
	// also call waitid when it exits, after the lockdown, which forbids
	// waitid: when the janitor won the race at rungv's exit, SIGSYS killed
	// rungv (exit status 159 after a clean stop).
	cmd.Process.Release()
	return w, nil
}

func newJanitorCommand() *cobra.Command {
	return &cobra.Command{
		Use:    janitorCommand + " DEV:INO:PATH...",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGQUIT)
			files := parseJanitorFiles(args)
			if err := lockJanitor(files); err != nil {
				// Still remove the sockets, as an unconfined janitor.
				fmt.Fprintln(os.Stderr, "rungv janitor:", err)
			}
			// Block until every write end is closed: rungv has exited.
			var buf [64]byte
			for {
				if n, err := unix.Read(janitorPipeFD, buf[:]); n <= 0 && err != unix.EINTR {
					break
				}
			}
			for _, f := range files {
				var st unix.Stat_t
				if unix.Lstat(f.path, &st) == nil && st.Dev == f.dev && st.Ino == f.ino && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
					unix.Unlinkat(unix.AT_FDCWD, f.path, 0)
				}
			}
			return nil
		},
	}
}

// janitorPipeFD is the janitor's end of its pipe (cmd.ExtraFiles[0]).
const janitorPipeFD = 3

// parseJanitorFiles parses the janitor's DEV:INO:PATH arguments, skipping
// malformed ones.
func parseJanitorFiles(args []string) []janitorFile {
	var files []janitorFile
	for _, a := range args {
		parts := strings.SplitN(a, ":", 3)
		if len(parts) != 3 {
			continue
		}
		dev, err1 := strconv.ParseUint(parts[0], 10, 64)
		ino, err2 := strconv.ParseUint(parts[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		files = append(files, janitorFile{path: parts[2], dev: dev, ino: ino})
	}
	return files
}

// lockJanitor closes the janitor's stdin and stdout and locks it down,
// keeping CAP_DAC_OVERRIDE only if a file's directory needs it.
func lockJanitor(files []janitorFile) error {
	unix.Close(0)
	unix.Close(1)
	// The read below must block; the filter allows no fcntl later.
	if err := unix.SetNonblock(janitorPipeFD, false); err != nil {
		return fmt.Errorf("janitor pipe: %w", err)
	}
	opts := lockdown.JanitorOptions{PipeFD: janitorPipeFD}
	for _, f := range files {
		need, err := lockdown.NeedsDACOverride(filepath.Dir(f.path))
		if err != nil {
			return err
		}
		opts.KeepDACOverride = opts.KeepDACOverride || need
	}
	return lockdown.InstallJanitor(opts)
}

// closeOnExecFrom marks every descriptor from first up close-on-exec.
func closeOnExecFrom(first int) error {
	err := unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err != unix.ENOSYS && err != unix.EINVAL {
		return err
	}
	// Kernels before 5.11.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= first {
			syscall.CloseOnExec(fd)
		}
	}
	return nil
}

// startJanitorFor starts one janitor for the control socket and the
// published unix sockets; it returns nil if there is nothing to remove.
// If it cannot start, it removes the sockets itself (rungv is not locked
// down yet) and fails.
func startJanitorFor(ctl *controlEndpoint, nw *netstack.Network) (*os.File, error) {
	files, err := janitorFiles(nw.SocketPaths())
	if ctl.file != nil {
		files = append(files, *ctl.file)
	}
	if err == nil {
		var janitor *os.File
		if janitor, err = startJanitor(files); err == nil {
			return janitor, nil
		}
	}
	for _, f := range files {
		os.Remove(f.path)
	}
	for _, path := range nw.SocketPaths() {
		os.Remove(path)
	}
	return nil, err
}

// identify returns the janitor entry for path as it is now.
func identify(path string) (janitorFile, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return janitorFile{}, err
	}
	return janitorFile{path: path, dev: st.Dev, ino: st.Ino}, nil
}

// janitorFiles returns the janitor's entries for the unix sockets at
// paths.
func janitorFiles(paths []string) ([]janitorFile, error) {
	var out []janitorFile
	for _, path := range paths {
		id, err := identify(path)
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}
