package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/internal/tailbuf"
)

// InflateEnv names the environment variable that picks how gzip layers are
// inflated: "go" keeps inflation in this process even where igzip is
// installed; anything else (or nothing) uses igzip when it is on PATH.
const InflateEnv = "GVX_INFLATE"

// igzipPath finds ISA-L's igzip (Debian package isal), or returns "" where
// it is missing or InflateEnv says "go". Inflating is what bounds a pull,
// and igzip inflates 2.3-2.8× faster than the best Go inflater on these
// machines (1.2-1.6 s against 3.5-3.8 s for a 346 MB Debian layer), so a
// pull hands gzip layers to it when it is installed, as containerd hands
// them to unpigz. It looks every time, so a long-lived process (Python
// with libgvx) follows changes to the environment; a look costs a few
// stat calls.
func igzipPath() string {
	if os.Getenv(InflateEnv) == "go" {
		return ""
	}
	p, err := exec.LookPath("igzip")
	if err != nil {
		return ""
	}
	return p
}

// Inflater names what inflates gzip layers in this process by default:
// "igzip" or "go".
func Inflater() string {
	if igzipPath() != "" {
		return "igzip"
	}
	return "go"
}

// stderrTail is how much of igzip's complaint is kept for the error.
const stderrTail = 4 << 10

// pipeSize is the buffer of the pipes to and from igzip. The default 64 KiB
// makes igzip and this process hand over the CPU every 64 KiB; with 1 MiB
// the consumer waited 40% less for inflated data.
const pipeSize = 1 << 20

// igzipReader is the output of an igzip child inflating one gzip stream.
// The child sees only the compressed bytes on its stdin and writes only to
// its stdout and stderr pipes; it never opens a file.
type igzipReader struct {
	ctx    context.Context
	cmd    *exec.Cmd
	stdout *os.File
	stderr tailbuf.Buffer
	// fed is closed when the goroutine feeding igzip's stdin is done;
	// sourceErr is then why the source ended early, if it did.
	fed       chan struct{}
	sourceErr error

	waitOnce sync.Once
	waitErr  error
}

// startIgzip starts igzip inflating src (which still holds the gzip magic).
func startIgzip(ctx context.Context, path string, src io.Reader) (*igzipReader, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("gzip: %w", err)
	}
	// A smaller pipe only costs speed.
	unix.FcntlInt(inW.Fd(), unix.F_SETPIPE_SZ, pipeSize)
	unix.FcntlInt(outW.Fd(), unix.F_SETPIPE_SZ, pipeSize)

	r := &igzipReader{ctx: ctx, stdout: outR, stderr: tailbuf.Buffer{Max: stderrTail}, fed: make(chan struct{})}
	r.cmd = exec.CommandContext(ctx, path, "-d", "-c")
	r.cmd.Stdin = inR
	r.cmd.Stdout = outW
	r.cmd.Stderr = &r.stderr
	err = r.cmd.Start()
	// The child holds its own copies of its ends now.
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("gzip: starting %s: %w (set %s=go to inflate without it)", path, err, InflateEnv)
	}
	go r.feed(inW, src)
	return r, nil
}

// feed copies the compressed stream to igzip's stdin. It ends at the end
// of src, or when igzip is gone and the pipe refuses writes.
func (r *igzipReader) feed(stdin *os.File, src io.Reader) {
	defer close(r.fed)
	defer stdin.Close()
	_, err := io.Copy(stdin, src)
	if err != nil && !errors.Is(err, unix.EPIPE) {
		r.sourceErr = err
	}
}

// Read implements io.Reader. The end of igzip's output is an end of
// stream only if igzip exited cleanly; otherwise it is the reason it did
// not.
func (r *igzipReader) Read(b []byte) (int, error) {
	n, err := r.stdout.Read(b)
	if err == io.EOF {
		if werr := r.wait(); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// wait reaps the child once and explains how it ended.
func (r *igzipReader) wait() error {
	r.waitOnce.Do(func() {
		err := r.cmd.Wait()
		<-r.fed
		r.stdout.Close()
		switch {
		case r.sourceErr != nil:
			r.waitErr = fmt.Errorf("reading: %w", r.sourceErr)
		case err == nil:
		case r.ctx.Err() != nil:
			// Killed because the pull was cancelled.
			r.waitErr = r.ctx.Err()
		default:
			var exit *exec.ExitError
			// igzip names its input "(null)" when it reads stdin.
			msg := strings.TrimSpace(strings.ReplaceAll(r.stderr.String(), " (null)", ""))
			if errors.As(err, &exit) && msg != "" {
				r.waitErr = fmt.Errorf("gzip: %s (the blob is truncated or corrupt)", msg)
			} else {
				r.waitErr = fmt.Errorf("gzip: igzip: %w (the blob may be corrupt; set %s=go to inflate without igzip)", err, InflateEnv)
			}
		}
	})
	return r.waitErr
}

// Close stops the child if it is still running and reaps it.
func (r *igzipReader) Close() error {
	if r.cmd.ProcessState == nil {
		r.cmd.Process.Kill()
	}
	r.wait()
	return nil
}
