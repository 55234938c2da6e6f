package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"z.gfire.dev/gvx/core/gvx"
	"z.gfire.dev/gvx/core/spec"
)

// process is a command started with gvx_process_start, with the output
// its caller has not read yet.
type process struct {
	p   *gvx.Process
	out [2]*outputQueue // stdout, stderr
}

// processes maps the integer handles C callers hold to processes. Handles
// are never reused, so a stale handle is always GVX_E_CLOSED.
var processes = struct {
	sync.Mutex
	next uint64
	m    map[uint64]*process
}{m: make(map[uint64]*process)}

type errClosedProcess uint64

func (h errClosedProcess) Error() string {
	return "the process handle is closed or was never returned by gvx_process_start: start the command again"
}

func getProcess(h uint64) (*process, error) {
	processes.Lock()
	defer processes.Unlock()
	p, ok := processes.m[h]
	if !ok {
		return nil, &statusError{statusClosed, errClosedProcess(h)}
	}
	return p, nil
}

// processQueueLimit is how much output of one stream a process keeps for
// its caller; beyond it the command waits, as on a full pipe.
const processQueueLimit = 1 << 20

// processRequest is gvx_process_start's request: what runs, and nothing
// about how output is taken (the caller reads it).
type processRequest struct {
	spec.Exec
}

func processStart(sandbox uint64, requestJSON string) (uint64, error) {
	sb, err := getSandbox(sandbox)
	if err != nil {
		return 0, err
	}
	var req processRequest
	if err := decodeJSON("request", requestJSON, &req); err != nil {
		return 0, err
	}
	proc := &process{out: [2]*outputQueue{newOutputQueue(processQueueLimit), newOutputQueue(processQueueLimit)}}
	p, err := sb.Start(context.Background(), nil, &gvx.ExecOptions{Exec: req.Exec, Stdout: proc.out[0], Stderr: proc.out[1]})
	if err != nil {
		return 0, err
	}
	proc.p = p
	go func() {
		// Done is closed once all output was written.
		<-p.Done()
		proc.out[0].finish()
		proc.out[1].finish()
	}()
	processes.Lock()
	defer processes.Unlock()
	processes.next++
	processes.m[processes.next] = proc
	return processes.next, nil
}

func processWrite(h uint64, data []byte) error {
	proc, err := getProcess(h)
	if err != nil {
		return err
	}
	if _, err := proc.p.Stdin().Write(data); err != nil {
		return processError(err)
	}
	return nil
}

func processCloseStdin(h uint64) error {
	proc, err := getProcess(h)
	if err != nil {
		return err
	}
	return proc.p.Stdin().Close()
}

// processError gives ErrProcessDone its status: the handle is live but
// the command is gone.
func processError(err error) error {
	if errors.Is(err, gvx.ErrProcessDone) {
		return &statusError{statusUnavailable, errors.New("the command has ended: read what is left of its output, then gvx_process_wait")}
	}
	return err
}

// deadline is the context of a call that waits at most timeoutMS
// milliseconds (negative: no limit) and ends early with cancel's token.
func deadline(timeoutMS int, cancel uint64) (context.Context, context.CancelFunc, error) {
	ctx, err := tokenContext(cancel)
	if err != nil {
		return nil, nil, err
	}
	if timeoutMS < 0 {
		ctx, stop := context.WithCancel(ctx)
		return ctx, stop, nil
	}
	ctx, stop := context.WithTimeout(ctx, time.Duration(timeoutMS)*time.Millisecond)
	return ctx, stop, nil
}

// waitError maps the end of a deadline's context to its status.
func waitError(ctx context.Context, what string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &statusError{statusTimeout, fmt.Errorf("%s within the timeout", what)}
	}
	return &statusError{statusCanceled, errors.New("gvx_cancel ended the call")}
}

func processRead(h uint64, stream int, buf []byte, timeoutMS int, cancel uint64) (int, error) {
	proc, err := getProcess(h)
	if err != nil {
		return 0, err
	}
	if stream != 1 && stream != 2 {
		return 0, invalid("stream %d is neither GVX_STDOUT (1) nor GVX_STDERR (2)", stream)
	}
	if len(buf) == 0 {
		return 0, invalid("the buffer has no room (cap 0)")
	}
	ctx, stop, err := deadline(timeoutMS, cancel)
	if err != nil {
		return 0, err
	}
	defer stop()
	n, err := proc.out[stream-1].read(ctx, buf)
	switch {
	case errors.Is(err, errQueueClosed):
		return 0, &statusError{statusClosed, errClosedProcess(h)}
	case err != nil:
		return 0, waitError(ctx, "no output")
	}
	return n, nil
}

func processSignal(h uint64, sig int, descendants bool) error {
	proc, err := getProcess(h)
	if err != nil {
		return err
	}
	if sig <= 0 || sig > 64 {
		return invalid("signal %d is not a signal number (1..64)", sig)
	}
	if descendants {
		err = proc.p.SignalDescendants(context.Background(), syscall.Signal(sig))
	} else {
		err = proc.p.Signal(context.Background(), syscall.Signal(sig))
	}
	return processError(err)
}

func processWait(h uint64, timeoutMS int, cancel uint64) (string, error) {
	proc, err := getProcess(h)
	if err != nil {
		return "", err
	}
	ctx, stop, err := deadline(timeoutMS, cancel)
	if err != nil {
		return "", err
	}
	defer stop()
	res, err := proc.p.Wait(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return "", waitError(ctx, "the command did not end")
		}
		return "", err
	}
	return encodeJSON(execResult{res.ExitCode, res.Signal, res.TimedOut, false, res.Duration.Seconds()}), nil
}

// processClose kills the command if it still runs and forgets the handle;
// calls blocked on it return GVX_E_CLOSED.
func processClose(h uint64) error {
	processes.Lock()
	proc, ok := processes.m[h]
	delete(processes.m, h)
	processes.Unlock()
	if !ok {
		return &statusError{statusClosed, errClosedProcess(h)}
	}
	proc.p.Kill()
	proc.out[0].close()
	proc.out[1].close()
	return nil
}
