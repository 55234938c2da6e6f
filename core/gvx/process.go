package gvx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"

	"z.gfire.dev/gvx/core/control"
)

// Process is a command started with Start that runs while the caller
// writes to its stdin and takes its output as it comes: a shell that
// keeps its state between commands, a REPL, a server.
type Process struct {
	sb    *Sandbox
	ex    *startedExec
	stdin *io.PipeWriter // nil when ExecOptions.Stdin feeds the command
	input *io.PipeReader // stdin's other end

	done chan struct{} // closed once res and err are set
	res  *ExecResult
	err  error

	stopWatch func() bool // stops the watch of Start's ctx
	killOnce  sync.Once
}

// Start starts a command and returns while it runs. Its stdin is
// ExecOptions.Stdin or, if that is nil, what the caller writes to Stdin;
// its output goes to ExecOptions.Stdout and Stderr as it comes (a writer
// that blocks holds up the command once 4 MiB are waiting, as a full pipe
// would) or, if they are nil, is captured into Wait's result. Timeout
// kills the command as Exec's does. If ctx ends before the command, the
// command is killed.
//
// Wait, or Kill, must be called for every Process: until the command
// ends it holds its share of the connection to the sandbox.
func (sb *Sandbox) Start(ctx context.Context, argv []string, opts *ExecOptions) (*Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := &Process{sb: sb, done: make(chan struct{})}
	var stdin io.Reader
	if opts == nil || opts.Stdin == nil {
		p.input, p.stdin = io.Pipe()
		stdin = p.input
	}
	ex, err := sb.startExec(argv, opts, stdin)
	if err != nil {
		return nil, err
	}
	p.ex = ex
	p.stopWatch = context.AfterFunc(ctx, p.Kill)
	go p.wait()
	return p, nil
}

// wait waits for the command's end and records it.
func (p *Process) wait() {
	res, err := p.ex.run.Wait(context.Background())
	p.stopWatch()
	if p.input != nil {
		// A write to a command that is gone, or blocked on it, returns
		// ErrProcessDone.
		p.input.CloseWithError(ErrProcessDone)
	}
	if err != nil {
		p.err = p.sb.callError(err)
	} else {
		p.res = p.ex.result(res)
	}
	close(p.done)
}

// ErrProcessDone is what writing to the stdin of a command that ended
// returns.
var ErrProcessDone = errors.New("gvx: the command has ended")

// Stdin is the command's stdin: what is written reaches the command in
// order, and Close gives it end of file. A Write returns once the data is
// on its way to the sandbox; writing to a command that ended returns
// ErrProcessDone. Nil if ExecOptions.Stdin feeds the command.
func (p *Process) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil
	}
	return p.stdin
}

// Signal sends sig (1 to 64) to the command and to every process it
// started.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	return p.signal(ctx, sig, false)
}

// SignalDescendants sends sig to every process the command started but
// not to the command itself: a terminal's Ctrl-C to the job a shell runs.
// A shell reading commands from its stdin survives it with its working
// directory and variables, and goes on to the next command; the job sees
// the signal (SIGINT: exit status 130). A command that started nothing
// is not signalled.
func (p *Process) SignalDescendants(ctx context.Context, sig syscall.Signal) error {
	return p.signal(ctx, sig, true)
}

func (p *Process) signal(ctx context.Context, sig syscall.Signal, descendants bool) error {
	select {
	case <-p.done:
		return ErrProcessDone
	default:
	}
	err := p.ex.run.Signal(ctx, int(sig), descendants)
	if control.IsCode(err, control.CodeNotFound) {
		// It ended as the request went.
		return ErrProcessDone
	}
	return p.sb.callError(err)
}

// Kill kills the command and every process it started, without waiting
// for it to end. It may be called at any time and more than once.
func (p *Process) Kill() {
	p.killOnce.Do(func() {
		select {
		case <-p.done:
			return
		default:
		}
		p.ex.run.Kill()
	})
}

// Done is closed once the command has ended and its output was written.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the command to end and returns how, as Exec does. If ctx
// ends first, Wait returns ctx's error and the command runs on; Wait may
// be called again, from any goroutine.
func (p *Process) Wait(ctx context.Context) (*ExecResult, error) {
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return nil, fmt.Errorf("gvx: the command is still running: %w", ctx.Err())
	}
}
