package gvx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/internal/tailbuf"
	"z.gfire.dev/gvx/core/spec"
)

// stderrTail is how much of rungv's stderr a Sandbox keeps for errors.
const stderrTail = 64 << 10

// closeGrace is how long Close gives the sandbox's init to exit after
// SIGTERM before rungv kills every guest process; closeMargin is how much
// longer Close waits for rungv to shut the sandbox down (write back its
// volumes) and exit before it kills rungv. Variables, so that tests can
// shorten them.
var (
	closeGrace  = 5 * time.Second
	closeMargin = 5 * time.Second
)

// Sandbox is a running sandbox. Its methods are safe for concurrent use.
type Sandbox struct {
	cfg    Config
	cmd    *exec.Cmd
	client *control.Client
	tail   *tailbuf.Buffer

	exited  chan struct{} // closed when the rungv process has exited
	waitErr error
	// status is the read end of the pipe rungv writes its command's exit
	// status to (--exit-status-fd); statusOnce reads it into code and
	// codeOK.
	status     *os.File
	statusOnce sync.Once
	code       int
	codeOK     bool
	// stopErr is why rungv could not shut the sandbox down, from the
	// pipe's second line; empty if it did.
	stopErr string

	closeOnce sync.Once
	closeErr  error
}

// ErrClosed is returned by calls on a closed Sandbox.
var ErrClosed = errors.New("gvx: the sandbox is closed")

// ErrStopFailed is wrapped by the error of a Close that found the sandbox
// did not stop cleanly: rungv had to be killed, ended before it reported
// the sandbox's end, or could not write back the sandbox's volumes. The
// process is gone all the same; the volumes keep their last committed
// state.
var ErrStopFailed = errors.New("gvx: the sandbox did not stop cleanly")

// New starts a sandbox and returns once it runs and answers on its control
// connection. ctx bounds the start (including pulling the image) only.
func New(ctx context.Context, cfg Config) (*Sandbox, error) {
	sp, err := cfg.check()
	if err != nil {
		return nil, err
	}
	rungv, err := cfg.rungvPath()
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, withHostLimitHint("creating the control socket pair", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "gvx-control")
	theirs := os.NewFile(uintptr(fds[1]), "gvx-control-child")
	status, statusW, err := os.Pipe()
	if err != nil {
		ours.Close()
		theirs.Close()
		return nil, withHostLimitHint("creating the exit status pipe", err)
	}
	// A spin slot, for as long as rungv runs (see takeSpinSlot): a Spin
	// left unset is New's to decide (see Config).
	releaseSpin := func() {}
	if sp.Spin == nil {
		var spin bool
		if releaseSpin, spin = takeSpinSlot(); !spin {
			sp.Spin = &spin
		}
	}
	specF, err := specFile(&sp)
	if err != nil {
		releaseSpin()
		ours.Close()
		theirs.Close()
		status.Close()
		statusW.Close()
		return nil, err
	}
	tail := &tailbuf.Buffer{Max: stderrTail}
	// ExtraFiles[0] is fd 3 in the child, ExtraFiles[1] fd 4, [2] fd 5.
	cmd := exec.Command(rungv, cfg.runArgs(3)...)
	cmd.ExtraFiles = []*os.File{theirs, statusW, specF}
	cmd.Stdin = cfg.Stdin
	cmd.Stdout = cfg.Stdout
	cmd.Stderr = tail
	if cfg.Stderr != nil {
		cmd.Stderr = io.MultiWriter(cfg.Stderr, tail)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// The sandbox dies with the caller, whatever kills the caller.
		Pdeathsig: syscall.SIGKILL,
		// A session of its own: terminal signals (Ctrl-C) go to the
		// caller, which decides; and where the kernel groups tasks by
		// session for fair scheduling (autogroup), each sandbox is weighed
		// as one group, as a container's cgroup is. With every sandbox's
		// Sentry in the caller's session, CPU-bound neighbours starved
		// whole fleets for tens of seconds (benchmarks/README, "Fleet
		// stalls"); gVisor already gives each stub process a session.
		Setsid: true,
	}
	err = startChild(cmd)
	// The child has its copy; ours must go, or a child that dies early
	// would leave the connection open and the handshake waiting.
	theirs.Close()
	statusW.Close()
	specF.Close()
	if err != nil {
		releaseSpin()
		ours.Close()
		status.Close()
		return nil, withHostLimitHint("starting "+rungv, err)
	}
	sb := &Sandbox{cfg: cfg, cmd: cmd, tail: tail, exited: make(chan struct{}), status: status}
	go func() {
		sb.waitErr = cmd.Wait()
		releaseSpin()
		close(sb.exited)
	}()

	conn, err := fileConn(ours)
	if err != nil {
		sb.kill()
		return nil, err
	}
	// The handshake completes once rungv serves the connection, which it
	// does after the sandbox started; if rungv dies first, the connection
	// ends and the error says why.
	type result struct {
		c   *control.Client
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := control.NewClient(ctx, conn, "gvx-go")
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			conn.Close()
			// rungv ends the connection when it fails to start, and
			// writes why to stderr just after: let it, rather than
			// killing it before it can say.
			select {
			case <-sb.exited:
			case <-time.After(startFailureGrace):
				sb.kill()
			}
			sb.statusOnce.Do(sb.readStatus)
			return nil, sb.startFailure(r.err)
		}
		sb.client = r.c
	case <-ctx.Done():
		conn.Close()
		sb.kill()
		return nil, ctx.Err()
	}
	return sb, nil
}

// startFailureGrace bounds how long New waits for a rungv that ended the
// control connection during start-up to exit on its own.
const startFailureGrace = 5 * time.Second

// failure explains why the sandbox failed: how rungv ended and its last
// words.
func (sb *Sandbox) failure(what string, err error) error {
	select {
	case <-sb.exited:
		err = fmt.Errorf("%w (%s)", err, sb.death())
	case <-time.After(2 * time.Second):
	}
	// rungv's words are data, never part of a format string: a panic
	// message may hold '%'.
	return fmt.Errorf("gvx: %s: %w%s", what, err, sb.lastWords())
}

// lastWords returns rungv's crash report or, without one, the tail of its
// stderr, as lines to append to an error; "" if rungv said nothing.
func (sb *Sandbox) lastWords() string {
	if crash, more := sb.tail.Crash(); crash != "" {
		report := crash
		if more > 0 {
			report += fmt.Sprintf("\n… and %d more lines: the whole report went to rungv's stderr (Config.Stderr in Go; the process's stderr from C and Python)", more)
		}
		if hint := crashHint(crash); hint != "" {
			report += "\n" + hint
		}
		return "\nrungv crashed:\n" + report
	}
	if msg := strings.TrimSpace(sb.tail.String()); msg != "" {
		return "\nrungv said:\n" + msg
	}
	return ""
}

// startFailure explains why rungv did not start. When rungv exited saying
// why, as it does for a bad image, flag or CPU set, its words lead: the
// failed handshake they caused is only a symptom, kept for errors.Is.
//
// Preconditions: sb.exited is closed.
func (sb *Sandbox) startFailure(handshake error) error {
	said := rungvError(sb.tail.String())
	var ee *exec.ExitError
	if said == "" || !errors.As(sb.waitErr, &ee) || !ee.Exited() {
		return sb.failure("starting the sandbox", handshake)
	}
	return &startError{said: said, how: sb.death(), handshake: handshake}
}

// rungvError returns what rungv reported as its error in its stderr: from
// the last line that starts with "rungv: " to the end.
func rungvError(stderr string) string {
	i := strings.LastIndex("\n"+stderr, "\nrungv: ")
	if i < 0 {
		return ""
	}
	return strings.TrimSpace(stderr[i:])
}

// startError is rungv's own account of why it did not start.
type startError struct {
	said, how string
	handshake error
}

// Error implements error.
func (e *startError) Error() string {
	return fmt.Sprintf("gvx: starting the sandbox: %s (%s)", e.said, e.how)
}

// Unwrap returns the failed control handshake.
func (e *startError) Unwrap() error { return e.handshake }

var _ error = (*startError)(nil)

// death describes how the rungv process ended.
//
// Preconditions: sb.exited is closed.
func (sb *Sandbox) death() string {
	var ee *exec.ExitError
	if !errors.As(sb.waitErr, &ee) {
		return "rungv exited"
	}
	st, ok := ee.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return sb.waitErr.Error()
	case st.Signaled() && st.Signal() == syscall.SIGSYS:
		return "rungv was killed by SIGSYS: it made a host system call outside its lockdown allowlist, " +
			"which is a gvx bug; please report it with the output of the same run under `rungv run --debug-seccomp`"
	case st.Signaled() && st.Signal() == syscall.SIGKILL:
		return "rungv was killed by SIGKILL (by another process, or the host's OOM killer)"
	case st.Signaled():
		return fmt.Sprintf("rungv was killed by %v", st.Signal())
	}
	return fmt.Sprintf("rungv exited with status %d", st.ExitStatus())
}

func (sb *Sandbox) kill() {
	sb.cmd.Process.Kill()
	<-sb.exited
	sb.statusOnce.Do(sb.readStatus)
}

// Info describes the sandbox.
func (sb *Sandbox) Info() SandboxInfo { return sb.client.Info() }

// Config returns the configuration sb was started with. A fresh sandbox
// from the same configuration, as an episode's reset wants, is
// New(ctx, sb.Config()); close sb once the fresh one runs.
func (sb *Sandbox) Config() Config { return sb.cfg }

// PID returns the rungv process's host PID.
func (sb *Sandbox) PID() int { return sb.cmd.Process.Pid }

// Run waits for the sandbox's init command to exit and returns its exit
// code (128+N if signal N killed it). With KeepAlive it returns when the
// sandbox is closed.
func (sb *Sandbox) Run(ctx context.Context) (int, error) {
	res, err := sb.client.Wait(ctx)
	if err != nil {
		if control.IsCode(err, control.CodeUnavailable) {
			return sb.exitCode()
		}
		return 0, err
	}
	return res.ExitCode, nil
}

// exitCode returns the command's exit status once rungv has exited, for a
// Wait that rungv did not answer (the command ended before the request
// came). rungv's own exit status cannot say it: a Go crash exits 2, as a
// command may. rungv writes the command's status to the exit status pipe
// once the command ended and the sandbox shut down; without it, rungv
// failed.
func (sb *Sandbox) exitCode() (int, error) {
	<-sb.exited
	sb.statusOnce.Do(sb.readStatus)
	if !sb.codeOK {
		return 0, sb.failure("waiting for the sandbox", errors.New("rungv failed before it reported the command's exit status"))
	}
	return sb.code, nil
}

// statusGrace bounds the wait for the exit status pipe's end after rungv
// exited: only a process rungv wrongly passed the pipe to could hold it.
const statusGrace = 2 * time.Second

// statusMax bounds what is read from the exit status pipe: rungv writes
// at most PIPE_BUF bytes there.
const statusMax = 4096

// readStatus reads the exit status pipe: the command's exit status on the
// first line, and, on a second line that rungv writes only then, why it
// could not shut the sandbox down (a Go-quoted string).
//
// Preconditions: sb.exited is closed.
func (sb *Sandbox) readStatus() {
	defer sb.status.Close()
	sb.status.SetReadDeadline(time.Now().Add(statusGrace))
	b, _ := io.ReadAll(io.LimitReader(sb.status, statusMax))
	line, rest, ok := strings.Cut(string(b), "\n")
	if !ok {
		return
	}
	code, err := strconv.Atoi(line)
	if err != nil {
		return
	}
	sb.code, sb.codeOK = code, true
	if rest == "" {
		return
	}
	// rungv writes both lines at once, so a second line is whole; read
	// one that is not as it is, still a failure.
	line = strings.TrimSuffix(rest, "\n")
	if msg, err := strconv.Unquote(line); err == nil {
		line = msg
	}
	sb.stopErr = line
}

// ExecOptions tune Exec. The zero value runs with the image's environment,
// working directory and user, no stdin, output captured.
type ExecOptions struct {
	// Exec is what runs, as every layer of gvx describes it (Env, Cwd,
	// User, Timeout, ...). Its Argv is used when Exec's argv is nil.
	spec.Exec
	Stdin  io.Reader
	Stdout io.Writer // nil: captured in ExecResult.Stdout
	Stderr io.Writer // nil: captured in ExecResult.Stderr
	// MaxOutput bounds the captured stdout and stderr, each: beyond it
	// the middle of the output is left out (ExecResult.Truncated). 0: no
	// bound.
	MaxOutput int
}

// ExecResult is how a command ended.
type ExecResult struct {
	ExitCode int
	Signal   int
	TimedOut bool
	Stdout   []byte
	Stderr   []byte
	// Truncated is set when captured output exceeded MaxOutput.
	Truncated bool
	Duration  time.Duration
}

// execAnswerGrace is how long after an exec's Timeout the SDK still waits
// for the sandbox's answer. The sandbox kills the command at the timeout
// and answers at once, unless it is stalled inside gVisor (README, known
// limitations), which can last minutes.
const execAnswerGrace = 5 * time.Second

// Exec runs a command in the sandbox and waits for it. A non-zero exit
// code is a result, not an error; so is, as with docker exec, a command
// that does not exist (exit code 127) or is not executable (126), with why
// on stderr. Errors mean the sandbox could not run it (a bad request, the
// sandbox gone). With a Timeout, Exec returns at most
// execAnswerGrace after it even if the sandbox does not answer, with an
// error that wraps context.DeadlineExceeded.
func (sb *Sandbox) Exec(ctx context.Context, argv []string, opts *ExecOptions) (*ExecResult, error) {
	ex, err := sb.startExec(argv, opts, nil)
	if err != nil {
		return nil, err
	}
	callCtx := ctx
	if ex.timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, ex.timeout+execAnswerGrace)
		defer cancel()
	}
	res, err := ex.run.Wait(callCtx)
	if callCtx.Err() != nil && err == callCtx.Err() {
		ex.run.Kill()
	}
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		// Our deadline, not the caller's: say what happened.
		return nil, fmt.Errorf("gvx: %q passed its %v timeout and the sandbox did not answer within %v more; it was told to kill the command, and may be stalled (see the README's known limitations): %w", ex.argv, ex.timeout, execAnswerGrace, err)
	}
	if err != nil {
		return nil, sb.callError(err)
	}
	return ex.result(res), nil
}

// startedExec is a command on its way, with what its result needs.
type startedExec struct {
	run            *control.Running
	argv           []string
	timeout        time.Duration
	stdout, stderr *captureBuffer
}

// startExec checks opts and starts the command; stdin, if set, replaces
// opts.Stdin.
func (sb *Sandbox) startExec(argv []string, opts *ExecOptions, stdin io.Reader) (*startedExec, error) {
	if opts == nil {
		opts = &ExecOptions{}
	}
	if opts.MaxOutput < 0 {
		return nil, fmt.Errorf("gvx: ExecOptions.MaxOutput is %d; use a positive byte count or 0 for no bound", opts.MaxOutput)
	}
	req := control.ExecRequest{Exec: opts.Exec}
	if argv != nil {
		req.Argv = argv
	}
	// As the sandbox would: Start's caller learns it now, not at Wait.
	if err := req.Exec.Validate(); err != nil {
		return nil, control.Errorf(control.CodeInvalid, "%v", err)
	}
	ex := &startedExec{
		argv:    req.Argv,
		timeout: time.Duration(req.Timeout),
		stdout:  &captureBuffer{limit: opts.MaxOutput},
		stderr:  &captureBuffer{limit: opts.MaxOutput},
	}
	eio := control.ExecIO{Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr}
	if stdin != nil {
		eio.Stdin = stdin
	}
	if eio.Stdout == nil {
		eio.Stdout = ex.stdout
	}
	if eio.Stderr == nil {
		eio.Stderr = ex.stderr
	}
	// Captured output is only kept in memory; the caller's writers may
	// block, and get a goroutine of their own (control.ExecIO).
	eio.InMemory = opts.Stdout == nil && opts.Stderr == nil
	run, err := sb.client.Start(req, eio)
	if err != nil {
		return nil, sb.callError(err)
	}
	ex.run = run
	return ex, nil
}

// result is the SDK's view of how the command ended.
func (ex *startedExec) result(res control.ExecResult) *ExecResult {
	return &ExecResult{
		ExitCode:  res.ExitCode,
		Signal:    res.Signal,
		TimedOut:  res.TimedOut,
		Stdout:    ex.stdout.Bytes(),
		Stderr:    ex.stderr.Bytes(),
		Truncated: ex.stdout.Truncated() || ex.stderr.Truncated(),
		Duration:  time.Duration(res.Duration),
	}
}

// callError adds rungv's last words to an error from a sandbox that died.
func (sb *Sandbox) callError(err error) error {
	if !control.IsCode(err, control.CodeUnavailable) {
		return err
	}
	// The connection ends a moment before the process is reaped.
	select {
	case <-sb.exited:
		return sb.failure("the sandbox exited", err)
	case <-time.After(2 * time.Second):
		return err
	}
}

// ReadFile returns the content of a file in the sandbox.
func (sb *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := sb.client.ReadFile(ctx, path, &buf); err != nil {
		return nil, sb.callError(err)
	}
	return buf.Bytes(), nil
}

// WriteOptions tune WriteFile.
type WriteOptions struct {
	// Mode is the file's permission bits, 0 to 07777, of which the
	// sandbox applies 0777 (set-user-ID, set-group-ID and sticky bits are
	// not applied; UploadDir and CopyIn carry them). 0: 0644.
	Mode fs.FileMode
	// MakeParents creates missing parent directories (mode 0755).
	MakeParents bool
	// Owner is who the file, and the directories MakeParents makes,
	// belong to instead of root: "uid[:gid]" or "name[:group]", resolved
	// as ExecOptions.User is.
	Owner string
}

// WriteFile creates or replaces the file path in the sandbox with what r
// holds until EOF, streamed, so that a file of any size (a `docker save`
// archive) passes through without being held in memory. The file appears
// whole or not at all: the sandbox writes a hidden file beside path and
// renames it over path once all of the content arrived, so a failed write
// (a full sandbox, a source that broke) leaves path as it was, and
// replacing a file needs room for both until the new one is complete. An
// existing file is replaced by a new one with opts.Mode: its mode, owner
// and other hard links do not carry over. A symlink at path is followed.
func (sb *Sandbox) WriteFile(ctx context.Context, path string, r io.Reader, opts WriteOptions) (FileInfo, error) {
	mode, err := unixMode(opts.Mode)
	if err != nil {
		return FileInfo{}, err
	}
	info, err := sb.client.WriteFile(ctx, control.WriteFileRequest{Path: path, Mode: mode, MakeParents: opts.MakeParents, Owner: opts.Owner}, r)
	return info, sb.callError(err)
}

// unixMode returns m as the protocol takes it, or an invalid argument
// error if m has bits beyond 07777.
func unixMode(m fs.FileMode) (uint32, error) {
	if m&^0o7777 != 0 {
		return 0, control.Errorf(control.CodeInvalid, "mode %#o has bits beyond the permission bits (07777)", uint32(m))
	}
	return uint32(m), nil
}

// Stat describes a file in the sandbox.
func (sb *Sandbox) Stat(ctx context.Context, path string) (FileInfo, error) {
	info, err := sb.client.Stat(ctx, path)
	return info, sb.callError(err)
}

// Stats reports the sandbox's resource use.
func (sb *Sandbox) Stats(ctx context.Context) (Stats, error) {
	st, err := sb.client.Stats(ctx)
	return st, sb.callError(err)
}

// Signal sends a signal (1 to 64) to the sandbox's init process.
func (sb *Sandbox) Signal(ctx context.Context, sig syscall.Signal) error {
	return sb.callError(sb.client.Signal(ctx, int(sig)))
}

// Close stops the sandbox and waits for the rungv process to exit: SIGTERM
// to the sandbox's init, then, after a grace period, SIGKILL to every
// guest process; rungv then writes back the sandbox's volumes and exits. A
// rungv that has not exited a while after the grace period is killed.
//
// Close returns nil if the sandbox stopped cleanly. Otherwise it returns an
// error that wraps ErrStopFailed and says what happened: rungv had to be
// killed; rungv ended before it reported the sandbox's end (killed from
// outside or crashed, before Close or during it); or rungv could not write
// back the volumes. The sandbox is gone either way; its volumes keep their
// last committed state, which may lack what was written since a guest's
// last fsync. Close is idempotent: later calls return the first call's
// result.
func (sb *Sandbox) Close() error {
	sb.closeOnce.Do(func() {
		wait := closeGrace + closeMargin
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		sb.client.Shutdown(ctx, closeGrace)
		killed := false
		select {
		case <-sb.exited:
		case <-ctx.Done():
			sb.cmd.Process.Kill()
			<-sb.exited
			killed = true
		}
		sb.statusOnce.Do(sb.readStatus)
		sb.client.Close()
		sb.closeErr = sb.stopError(killed, wait)
	})
	return sb.closeErr
}

// stopError says how the sandbox failed to stop, or returns nil if it
// stopped cleanly: rungv reported the sandbox's end, and no failure to
// shut it down. killed says that Close killed rungv after waiting for it
// for waited.
//
// Preconditions: sb.exited is closed and the exit status pipe read.
func (sb *Sandbox) stopError(killed bool, waited time.Duration) error {
	const volumes = "its volumes, if any, keep their last committed state, which may lack what was written since a guest's last fsync"
	switch {
	case killed && !sb.codeOK:
		return fmt.Errorf("%w: rungv had not shut the sandbox down %v after it was asked to (%v for the init to exit after SIGTERM, %v more to end the rest and write back the volumes), so Close killed it with SIGKILL; %s. "+
			"A host too busy to run the sandbox, or a sandbox stalled inside gVisor (README, Known limitations), does this: check the host's load, and check the volumes with `rungv volume check` before reusing them%s",
			ErrStopFailed, waited, closeGrace, waited-closeGrace, volumes, sb.lastWords())
	case !sb.codeOK:
		return fmt.Errorf("%w: rungv ended before it reported the sandbox's end (%s); %s: check them with `rungv volume check` before reusing them%s",
			ErrStopFailed, sb.death(), volumes, sb.lastWords())
	case sb.stopErr != "":
		return fmt.Errorf("%w: rungv could not shut the sandbox down: %s", ErrStopFailed, sb.stopErr)
	}
	return nil
}
