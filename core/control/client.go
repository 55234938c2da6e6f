package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Client is a connection to one sandbox. Its methods may be called from
// many goroutines at once; each call is an independent request.
type Client struct {
	conn    net.Conn
	fw      *frameWriter
	welcome Welcome

	mu     sync.Mutex
	nextID uint64
	calls  map[uint64]*clientCall
	err    error // why the connection ended; set once
	closed chan struct{}
}

// clientCall is a request waiting for its response.
type clientCall struct {
	file io.Writer
	resp chan message
	// fileErr is file's first write error, which fails the call: a file
	// or archive is the call's result. The reader goroutine sets it
	// before it delivers the response.
	fileErr error
	// out passes an exec's output and then its response on; nil for
	// other requests.
	out *outbox
}

// Dial connects to a sandbox's control endpoint: "unix:PATH" or a path.
func Dial(ctx context.Context, addr string) (*Client, error) {
	path := strings.TrimPrefix(addr, "unix:")
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connecting to the sandbox at %s: %w (is the rungv process running?)", path, err)
	}
	c, err := NewClient(ctx, conn, "gvx-go")
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// NewClient runs the handshake on conn and starts reading responses. The
// client owns conn from then on.
func NewClient(ctx context.Context, conn net.Conn, name string) (*Client, error) {
	c := &Client{conn: conn, fw: &frameWriter{w: conn}, calls: make(map[uint64]*clientCall), closed: make(chan struct{})}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
		defer conn.SetDeadline(time.Time{})
	}
	if err := c.fw.writeJSON(Hello{Protocol: ProtocolName, Version: Version, Client: name, OutputWindow: execOutputWindow}); err != nil {
		return nil, fmt.Errorf("control handshake: %w", err)
	}
	fr := newFrameReader(conn)
	p, err := fr.next()
	if err != nil {
		return nil, fmt.Errorf("control handshake: %w (the sandbox closed the connection)", err)
	}
	if p[0] != kindJSON || json.Unmarshal(p[1:], &c.welcome) != nil || c.welcome.Protocol != ProtocolName {
		return nil, fmt.Errorf("control handshake: the peer does not speak %s", ProtocolName)
	}
	if c.welcome.Error != nil {
		return nil, c.welcome.Error
	}
	go c.read(fr)
	return c, nil
}

// Info describes the sandbox.
func (c *Client) Info() SandboxInfo { return c.welcome.Sandbox }

// Close closes the connection. Commands it started that are still running
// are killed by the sandbox.
func (c *Client) Close() error {
	c.fail(net.ErrClosed)
	return c.conn.Close()
}

// Done is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.closed }

// Err says why the connection ended (nil while it is up).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	close(c.closed)
}

// read routes frames to calls until the connection ends.
func (c *Client) read(fr *frameReader) {
	for {
		p, err := fr.next()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
				err = errors.New("the sandbox closed the control connection (it exited or was killed)")
			}
			c.fail(err)
			c.conn.Close()
			return
		}
		switch p[0] {
		case kindJSON:
			var m message
			if err := json.Unmarshal(p[1:], &m); err != nil {
				c.fail(fmt.Errorf("malformed message from the sandbox: %w", err))
				c.conn.Close()
				return
			}
			c.mu.Lock()
			call := c.calls[m.ID]
			delete(c.calls, m.ID)
			c.mu.Unlock()
			switch {
			case call == nil:
			case call.out != nil:
				call.out.respond(m)
			default:
				call.resp <- m
			}
		case kindData:
			d, err := parseData(p)
			if err != nil {
				c.fail(err)
				c.conn.Close()
				return
			}
			c.mu.Lock()
			call := c.calls[d.id]
			c.mu.Unlock()
			if call == nil {
				continue
			}
			if len(d.data) == 0 {
				continue
			}
			if call.out != nil {
				if d.stream == StreamStdout || d.stream == StreamStderr {
					call.out.put(d.stream, d.data)
				}
				continue
			}
			if d.stream == StreamFile && call.file != nil && call.fileErr == nil {
				_, call.fileErr = call.file.Write(d.data)
			}
		}
	}
}

// start sends a request and registers its call.
func (c *Client) start(method string, params any, call *clientCall) (uint64, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return 0, err
	}
	call.resp = make(chan message, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, unavailable(err)
	}
	c.nextID++
	id := c.nextID
	if call.out != nil {
		call.out.id, call.out.resp = id, call.resp
	}
	c.calls[id] = call
	c.mu.Unlock()
	if err := c.fw.writeJSON(message{ID: id, Method: method, Params: raw}); err != nil {
		c.forget(id)
		return 0, unavailable(err)
	}
	return id, nil
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

func unavailable(err error) error {
	return &Error{Code: CodeUnavailable, Message: "the sandbox is not reachable: " + err.Error()}
}

// wait waits for a call's response and decodes its result into out.
func (c *Client) wait(ctx context.Context, id uint64, call *clientCall, out any) error {
	select {
	case m := <-call.resp:
		return call.result(m, out)
	case <-c.closed:
		// The response may have raced with the end of the connection.
		select {
		case m := <-call.resp:
			return call.result(m, out)
		default:
		}
		if call.out.hasAnswer() {
			// It came, behind output still being written.
			select {
			case m := <-call.resp:
				return call.result(m, out)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		c.forget(id)
		return unavailable(c.Err())
	case <-ctx.Done():
		c.forget(id)
		return ctx.Err()
	}
}

// result decodes the call's response m into out.
func (call *clientCall) result(m message, out any) error {
	if m.Error != nil {
		return m.Error
	}
	if call.fileErr != nil {
		return fmt.Errorf("writing what the sandbox sent: %w", call.fileErr)
	}
	if out != nil && len(m.Result) > 0 {
		if err := json.Unmarshal(m.Result, out); err != nil {
			return fmt.Errorf("malformed result from the sandbox: %w", err)
		}
	}
	return nil
}

func (c *Client) call(ctx context.Context, method string, params, out any) error {
	call := &clientCall{}
	id, err := c.start(method, params, call)
	if err != nil {
		return err
	}
	return c.wait(ctx, id, call, out)
}

// ExecIO are the streams of an Exec. Writers are called in order, from a
// goroutine of the exec's own. A slow writer holds up its own command, as
// a slow reader of a pipe would (the sandbox sends output only as the
// writers take it), and not the client's other requests.
type ExecIO struct {
	Stdin  io.Reader // nil: /dev/null
	Stdout io.Writer // nil: discarded
	Stderr io.Writer // nil: discarded
	// InMemory says that Stdout and Stderr only keep what they are given
	// in memory, as a bytes.Buffer does, and never block: they are then
	// called on the goroutine that reads the connection, which saves
	// handing each chunk of output to another goroutine. A writer that
	// does block would stall every request on the connection.
	InMemory bool
}

// Exec runs a command to completion and returns once its output was
// written. If ctx ends first, the command is killed and ctx's error
// returned; a write under way may still return after that, and nothing is
// written from then on.
func (c *Client) Exec(ctx context.Context, req ExecRequest, eio ExecIO) (ExecResult, error) {
	r, err := c.Start(req, eio)
	if err != nil {
		return ExecResult{}, err
	}
	res, err := r.Wait(ctx)
	if ctx.Err() != nil && err == ctx.Err() {
		r.Kill()
	}
	return res, err
}

// Running is a command started with Start.
type Running struct {
	c    *Client
	id   uint64
	call *clientCall
}

// Start starts a command and returns while it runs: its stdin streams
// from eio.Stdin and its output goes to eio's writers until it ends.
// Wait must be called, once, to learn how it ended and to release what
// the call holds.
func (c *Client) Start(req ExecRequest, eio ExecIO) (*Running, error) {
	req.Stdin = eio.Stdin != nil
	call := &clientCall{out: newOutbox(c, eio)}
	id, err := c.start(MethodExec, req, call)
	if err != nil {
		call.out.drop()
		return nil, err
	}
	if eio.Stdin != nil {
		go c.sendInput(id, StreamStdin, eio.Stdin)
	}
	return &Running{c: c, id: id, call: call}, nil
}

// Wait waits for the command to end and its output to be written. If
// ctx ends first, Wait returns ctx's error and the command runs on; the
// rest of its output is not delivered.
func (r *Running) Wait(ctx context.Context) (ExecResult, error) {
	// After a result all output was written and this does nothing; after
	// an error it ends the delivery of the rest.
	defer r.call.out.drop()
	var res ExecResult
	err := r.c.wait(ctx, r.id, r.call, &res)
	return res, err
}

// Signal sends sig to the command and every process it started or, with
// descendants, only to the processes it started
// (SignalRequest.Descendants).
func (r *Running) Signal(ctx context.Context, sig int, descendants bool) error {
	return r.c.call(ctx, MethodSignal, SignalRequest{Exec: r.id, Signal: sig, Descendants: descendants}, nil)
}

// Kill kills the command, in the background: a sandbox that did not
// answer in time may not read this either, and a full socket would block
// the write. Its answer, and output the command writes as it dies, are
// dropped.
func (r *Running) Kill() {
	go func() {
		r.c.stopOutput(r.id)
		if kid, err := r.c.start(MethodSignal, SignalRequest{Exec: r.id, Signal: int(syscall.SIGKILL)}, &clientCall{}); err == nil {
			r.c.forget(kid)
		}
	}()
}

// sendInput streams r as data frames and ends the stream. A read error
// ends it too: a command's stdin sees EOF, a file or archive (StreamFile)
// is aborted, so the request fails.
func (c *Client) sendInput(id uint64, stream uint8, r io.Reader) error {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := c.fw.writeData(id, stream, 0, buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			flags := uint8(FlagEOF)
			if err == io.EOF {
				err = nil
			} else if stream == StreamFile {
				flags |= FlagAbort
			}
			c.fw.writeData(id, stream, flags, nil)
			return err
		}
		c.mu.Lock()
		_, live := c.calls[id]
		c.mu.Unlock()
		if !live {
			return nil
		}
	}
}

// Signal sends a signal to the sandbox's init process.
func (c *Client) Signal(ctx context.Context, sig int) error {
	return c.call(ctx, MethodSignal, SignalRequest{Signal: sig}, nil)
}

// ReadFile writes the content of a regular file in the sandbox to w.
func (c *Client) ReadFile(ctx context.Context, path string, w io.Writer) (FileInfo, error) {
	call := &clientCall{file: w}
	id, err := c.start(MethodReadFile, PathRequest{Path: path}, call)
	if err != nil {
		return FileInfo{}, err
	}
	var info FileInfo
	return info, c.wait(ctx, id, call, &info)
}

// WriteFile creates or replaces a regular file in the sandbox with r's
// content.
func (c *Client) WriteFile(ctx context.Context, req WriteFileRequest, r io.Reader) (FileInfo, error) {
	call := &clientCall{}
	id, err := c.start(MethodWriteFile, req, call)
	if err != nil {
		return FileInfo{}, err
	}
	sent := c.sendFile(id, r)
	var info FileInfo
	return info, sent.or(c.wait(ctx, id, call, &info))
}

// CopyIn extracts the tar stream r into the guest directory req.Path, which
// is created with its parents if missing.
func (c *Client) CopyIn(ctx context.Context, req CopyInRequest, r io.Reader) (CopyResult, error) {
	call := &clientCall{}
	id, err := c.start(MethodCopyIn, req, call)
	if err != nil {
		return CopyResult{}, err
	}
	sent := c.sendFile(id, r)
	var res CopyResult
	return res, sent.or(c.wait(ctx, id, call, &res))
}

// sentFile holds the read error that aborted a request's file or archive.
type sentFile chan error

// sendFile streams r on StreamFile in the background.
func (c *Client) sendFile(id uint64, r io.Reader) sentFile {
	failed := make(sentFile, 1)
	go c.sendInput(id, StreamFile, noteFailure{r, failed})
	return failed
}

// noteFailure passes reads through and notes the first read error other
// than EOF before it is returned, so before sendInput sends the abort
// frame, and so before the sandbox's answer to it can arrive.
type noteFailure struct {
	r      io.Reader
	failed sentFile
}

func (n noteFailure) Read(p []byte) (int, error) {
	k, err := n.r.Read(p)
	if err != nil && err != io.EOF {
		select {
		case n.failed <- err:
		default:
		}
	}
	return k, err
}

// SourceError is the failure of the reader a request's file or archive
// came from (the caller's file, not the sandbox), which aborted the
// request.
type SourceError struct {
	Err error
}

// Error implements error.
func (e *SourceError) Error() string { return "reading what was to be sent: " + e.Err.Error() }

// Unwrap returns the reader's error.
func (e *SourceError) Unwrap() error { return e.Err }

var _ error = (*SourceError)(nil)

// or returns the error that failed the source of the stream, which says
// more than the sandbox's report of an aborted stream, or else err.
func (s sentFile) or(err error) error {
	if err == nil {
		return nil
	}
	select {
	case serr := <-s:
		return &SourceError{Err: serr}
	default: // the source did not fail, or not yet: the sandbox failed first
		return err
	}
}

// CopyOut writes the file or directory tree at path in the sandbox to w as
// a tar stream.
func (c *Client) CopyOut(ctx context.Context, path string, w io.Writer) (CopyResult, error) {
	call := &clientCall{file: w}
	id, err := c.start(MethodCopyOut, PathRequest{Path: path}, call)
	if err != nil {
		return CopyResult{}, err
	}
	var res CopyResult
	return res, c.wait(ctx, id, call, &res)
}

// Checkpoint writes a snapshot of the sandbox to w; see CheckpointRequest.
func (c *Client) Checkpoint(ctx context.Context, req CheckpointRequest, w io.Writer) (CheckpointResult, error) {
	call := &clientCall{file: w}
	id, err := c.start(MethodCheckpoint, req, call)
	if err != nil {
		return CheckpointResult{}, err
	}
	var res CheckpointResult
	return res, c.wait(ctx, id, call, &res)
}

// Stat describes a file in the sandbox.
func (c *Client) Stat(ctx context.Context, path string) (FileInfo, error) {
	var info FileInfo
	return info, c.call(ctx, MethodStat, PathRequest{Path: path}, &info)
}

// Wait blocks until the sandbox's init process exits.
func (c *Client) Wait(ctx context.Context) (WaitResult, error) {
	var res WaitResult
	return res, c.call(ctx, MethodWait, struct{}{}, &res)
}

// Stats reports the sandbox's resource use.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	return st, c.call(ctx, MethodStats, struct{}{}, &st)
}

// Shutdown stops the sandbox: SIGTERM to init, SIGKILL after grace.
func (c *Client) Shutdown(ctx context.Context, grace time.Duration) error {
	return c.call(ctx, MethodShutdown, ShutdownRequest{Grace: Duration(grace)}, nil)
}
