package main

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// openExitStatus returns the inherited descriptor fd that --exit-status-fd
// names, or nil if it is 0. rungv writes the command's exit status there
// once the command ended, so that its caller can tell that status from
// rungv's own failure: a Go crash exits 2, a killed rungv has a signal,
// and either would otherwise pass for the command's.
func openExitStatus(fd int) (*os.File, error) {
	if fd == 0 {
		return nil, nil
	}
	if fd < 3 {
		return nil, fmt.Errorf("--exit-status-fd %d: want a descriptor >= 3 that the caller passed, the write end of a pipe", fd)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("--exit-status-fd %d: %w: pass the write end of a pipe as descriptor %d", fd, err, fd)
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO || flags&unix.O_ACCMODE == unix.O_RDONLY {
		return nil, fmt.Errorf("--exit-status-fd %d: descriptor %d is not the write end of a pipe: pass one", fd, fd)
	}
	// Nothing rungv starts may hold it: its end is how the caller
	// learns that rungv is gone.
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "exit-status"), nil
}

// exitStatusMax is PIPE_BUF: a write of at most this many bytes goes into
// an empty pipe at once and whole, without a reader.
const exitStatusMax = 4096

// writeExitStatus writes the command's exit status as a decimal line to
// the --exit-status-fd pipe and, if closing the sandbox failed (its
// volumes not written back), a second line with the error, Go-quoted so
// that it is one line, shortened to fit exitStatusMax. Both go in one
// write, so the caller finds both lines or neither. A caller that reads
// only one line finds no exit status when there are two, which it takes
// for a failure of rungv: so it is.
func writeExitStatus(w io.Writer, code int, closeErr error) error {
	out := strconv.Itoa(code) + "\n"
	if closeErr != nil {
		msg := closeErr.Error()
		line := strconv.Quote(msg)
		for len(out)+len(line)+1 > exitStatusMax {
			msg = msg[:len(msg)*3/4]
			line = strconv.Quote(msg + " …")
		}
		out += line + "\n"
	}
	_, err := io.WriteString(w, out)
	return err
}
