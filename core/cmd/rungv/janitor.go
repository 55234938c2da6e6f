package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// The janitor removes files rungv created on the host (unix sockets of
// --control and of ports published with -p unix:…) once rungv is gone,
// however it went:
// after lockdown rungv itself may not unlink anything, and after kill -9 it
// can do nothing at all. The janitor is a second rungv process started
// before lockdown; it waits for the end of a pipe whose write end only
// rungv holds, then removes the files it was given — each only if it is
// still the socket rungv made (same device and inode).

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
			// Block until every write end is closed: rungv has exited.
			io.Copy(io.Discard, os.NewFile(3, "janitor-pipe"))
			for _, a := range args {
				parts := strings.SplitN(a, ":", 3)
				if len(parts) != 3 {
					continue
				}
				dev, _ := strconv.ParseUint(parts[0], 10, 64)
				ino, _ := strconv.ParseUint(parts[1], 10, 64)
				var st unix.Stat_t
				if unix.Lstat(parts[2], &st) == nil && st.Dev == dev && st.Ino == ino && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
					os.Remove(parts[2])
				}
			}
			return nil
		},
	}
}

// startJanitorFor starts one janitor for the control socket and the
// published unix sockets; it returns nil if there is nothing to remove.
// If it cannot start, it removes the sockets itself (rungv is not locked
// down yet) and fails.
func startJanitorFor(ctl *controlEndpoint, nw *sandboxNetwork) (*os.File, error) {
	files, err := nw.janitorFiles()
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
