package control

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Backend is what a sandbox offers its clients; rungv implements it over
// core/sentry. Methods are called concurrently.
type Backend interface {
	// Info describes the sandbox.
	Info() SandboxInfo
	// Exec starts a command. Stdio.Stdin is nil when the request has no
	// stdin (the command gets /dev/null).
	Exec(ctx context.Context, req ExecRequest, stdio Stdio) (Process, error)
	// SignalInit sends a signal to the sandbox's init process.
	SignalInit(sig int) error
	// ReadFile writes the content of a regular file to w.
	ReadFile(ctx context.Context, path string, w io.Writer) (FileInfo, error)
	// WriteFile creates or replaces a regular file with r's content, whole
	// or not at all.
	WriteFile(ctx context.Context, req WriteFileRequest, r io.Reader) (FileInfo, error)
	// CopyIn extracts the tar stream r into the guest directory req.Path,
	// creating it and its parents if missing.
	CopyIn(ctx context.Context, req CopyInRequest, r io.Reader) (CopyResult, error)
	// CopyOut writes the file or tree at path to w as a tar stream.
	CopyOut(ctx context.Context, path string, w io.Writer) (CopyResult, error)
	// Stat describes a file, following symlinks as stat(2) does.
	Stat(ctx context.Context, path string) (FileInfo, error)
	// Wait blocks until init exits (or ctx ends).
	Wait(ctx context.Context) (WaitResult, error)
	// Shutdown stops the sandbox: SIGTERM to init, SIGKILL to all after
	// grace. It returns when everything is stopped.
	Shutdown(ctx context.Context, grace time.Duration) error
	// Stats reports the sandbox's resource use.
	Stats(ctx context.Context) (Stats, error)
	// Checkpoint writes a snapshot of the sandbox to w.
	Checkpoint(ctx context.Context, req CheckpointRequest, w io.Writer) (CheckpointResult, error)
}

// Stdio are a command's standard streams.
type Stdio struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Process is a running command.
type Process interface {
	// PID is the command's process ID inside the sandbox.
	PID() int
	// Signal sends sig to the command and to every process it started,
	// so that a timeout, a cancel or a client that went away ends the
	// whole command, not only the shell at its top.
	Signal(sig int) error
	// SignalDescendants sends sig to every process the command started
	// but not to the command itself, as a terminal's ^C reaches the job
	// a shell runs and not the shell.
	SignalDescendants(sig int) error
	// Wait returns once the command exited and all its output has been
	// written to Stdio: the exit code (128+N after signal N) and the
	// killing signal, if any.
	Wait() (exitCode, signal int, err error)
}

// Server serves the protocol for one Backend.
type Server struct {
	backend Backend
	// Logf, if set, receives one line per connection-level failure.
	Logf func(format string, args ...any)
	// Track, if set, is called as each request starts; the function it
	// returns is called once the request's work is done, before the answer
	// is sent. rungv uses it to learn when the sandbox has gone quiet.
	Track func() (end func())

	// answering counts requests whose answers are not sent yet, and the
	// handshakes of connections handed to ServeConnAsync.
	answering inFlight
}

// inFlight counts work in progress and lets callers wait, with a timeout,
// for a moment when there is none. Unlike a sync.WaitGroup, work may start
// while someone waits, which a server taking requests as it ends does.
type inFlight struct {
	mu sync.Mutex
	n  int
	// idle is closed when n falls to zero; a new one is made when n
	// leaves zero.
	idle chan struct{}
}

func (f *inFlight) add() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
}

func (f *inFlight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n--; f.n == 0 {
		close(f.idle)
	}
}

// idleCh returns a channel that is closed once nothing is in progress.
func (f *inFlight) idleCh() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		closed := make(chan struct{})
		close(closed)
		return closed
	}
	return f.idle
}

// WaitAnswered waits up to timeout for every request in progress to be
// answered, and every connection given to ServeConnAsync to be greeted. A
// sandbox that ends calls it before it stops serving, so that the request
// that ended it (a checkpoint that stops it, a shutdown) gets its answer,
// and the client that started it learns that it did start, however soon
// its command ended.
func (s *Server) WaitAnswered(timeout time.Duration) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-s.answering.idleCh():
	case <-timer.C:
	}
}

// NewServer returns a server for b.
func NewServer(b Backend) *Server {
	return &Server{backend: b}
}

func (s *Server) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

// Serve accepts connections on l until ctx ends or l fails, serving each in
// its own goroutine.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.ServeConn(ctx, c); err != nil {
				s.logf("control: connection: %v", err)
			}
		}()
	}
}

// serverConn is one client connection.
type serverConn struct {
	s  *Server
	c  net.Conn
	fw *frameWriter

	mu    sync.Mutex
	calls map[uint64]*serverCall
	// window is the output window the client asked for in its hello; 0:
	// its execs' output is not flow-controlled.
	window int
	// abandoned is set once the client went away: an exec whose process
	// starts after abandon ran must kill it itself.
	abandoned bool
}

// serverCall is a request in progress.
type serverCall struct {
	in      *streamPipe   // stdin or a written file's content, if any
	process Process       // a running exec
	out     *outputWindow // an exec's output window, if flow-controlled
	isExec  bool
	// early are the signals that came while the exec was starting, to be
	// sent once it runs: a client may signal a command it just started.
	early []SignalRequest
}

// ServeConn serves one connection until the client closes it. Commands the
// client started and did not see finish are killed when it goes away.
func (s *Server) ServeConn(ctx context.Context, c net.Conn) error {
	return s.serveConn(ctx, c, func() {})
}

// ServeConnAsync serves c as ServeConn does, in a new goroutine, and calls
// done with the result. Its handshake counts as a request in progress
// (WaitAnswered) from this call on.
func (s *Server) ServeConnAsync(ctx context.Context, c net.Conn, done func(error)) {
	s.answering.add()
	go func() { done(s.serveConn(ctx, c, s.answering.done)) }()
}

// serveConn is ServeConn; greeted is called once the handshake is over.
func (s *Server) serveConn(ctx context.Context, c net.Conn, greeted func()) error {
	defer c.Close()
	sc := &serverConn{s: s, c: c, fw: &frameWriter{w: c}, calls: make(map[uint64]*serverCall)}
	fr := newFrameReader(c)
	err := sc.handshake(fr)
	greeted()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		sc.abandon()
		wg.Wait()
	}()
	for {
		p, err := fr.next()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) {
				return nil
			}
			return err
		}
		switch p[0] {
		case kindJSON:
			var m message
			if err := json.Unmarshal(p[1:], &m); err != nil {
				return fmt.Errorf("malformed message: %w", err)
			}
			call := sc.register(m)
			if call == nil {
				continue
			}
			wg.Add(1)
			s.answering.add()
			go func() {
				defer wg.Done()
				defer s.answering.done()
				sc.handle(ctx, m, call)
			}()
		case kindData:
			d, err := parseData(p)
			if err != nil {
				return err
			}
			sc.mu.Lock()
			call := sc.calls[d.id]
			sc.mu.Unlock()
			if d.stream == StreamCredit {
				if err := applyCredit(call, d); err != nil {
					return err
				}
				continue
			}
			if call == nil || call.in == nil {
				continue // the request already ended: drop
			}
			call.in.write(d.data)
			switch {
			case d.flags&FlagAbort != 0:
				call.in.finish(ErrStreamAborted)
			case d.flags&FlagEOF != 0:
				call.in.finish(io.EOF)
			}
		default:
			return fmt.Errorf("unknown frame kind %q", p[0])
		}
	}
}

func (sc *serverConn) handshake(fr *frameReader) error {
	p, err := fr.next()
	if err != nil {
		return fmt.Errorf("reading hello: %w", err)
	}
	var h Hello
	if p[0] != kindJSON || json.Unmarshal(p[1:], &h) != nil || h.Protocol != ProtocolName {
		return fmt.Errorf("the client does not speak %s", ProtocolName)
	}
	w := Welcome{Protocol: ProtocolName, Version: Version, Sandbox: sc.s.backend.Info()}
	if h.OutputWindow > FrameCredit {
		sc.window = h.OutputWindow
		w.OutputWindow = h.OutputWindow
	}
	if h.Version != Version {
		w.Error = Errorf(CodeUnsupported, "this sandbox speaks %s version %d, the client version %d: use a client from the same gvx release as rungv", ProtocolName, Version, h.Version)
	}
	if err := sc.fw.writeJSON(w); err != nil {
		return err
	}
	if w.Error != nil {
		return w.Error
	}
	return nil
}

// register records a new request; it returns nil (after answering) for a
// duplicate id.
func (sc *serverConn) register(m message) *serverCall {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if _, dup := sc.calls[m.ID]; dup {
		go sc.fw.writeJSON(message{ID: m.ID, Error: Errorf(CodeInvalid, "request id %d is already in use on this connection", m.ID)})
		return nil
	}
	call := &serverCall{}
	switch m.Method {
	case MethodExec, MethodWriteFile, MethodCopyIn:
		// Input may arrive right behind the request.
		call.in = newStreamPipe()
	}
	call.isExec = m.Method == MethodExec
	if call.isExec && sc.window > 0 {
		call.out = newOutputWindow(sc.window)
	}
	sc.calls[m.ID] = call
	return call
}

// applyCredit applies a credit frame to its call, an exec whose output is
// flow-controlled; for an exec that already ended it does nothing.
func applyCredit(call *serverCall, d dataFrame) error {
	if call == nil || call.out == nil {
		return nil
	}
	if d.flags&FlagEOF != 0 {
		call.out.close()
		return nil
	}
	n, k := binary.Uvarint(d.data)
	if k <= 0 || k != len(d.data) {
		return errors.New("malformed credit frame: its bytes are not one uvarint")
	}
	call.out.grant(n)
	return nil
}

func (sc *serverConn) done(id uint64) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if call := sc.calls[id]; call != nil && call.in != nil {
		call.in.Close()
	}
	if call := sc.calls[id]; call != nil && call.out != nil {
		call.out.close()
	}
	delete(sc.calls, id)
}

// abandon kills the commands of a connection that went away.
func (sc *serverConn) abandon() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.abandoned = true
	for _, call := range sc.calls {
		if call.in != nil {
			call.in.finish(io.ErrUnexpectedEOF)
		}
		if call.out != nil {
			// Nobody takes the output now; a writer waiting for credit
			// must not keep the command's end waiting.
			call.out.close()
		}
		if call.process != nil {
			call.process.Signal(int(syscall.SIGKILL))
		}
	}
}

func (sc *serverConn) handle(ctx context.Context, m message, call *serverCall) {
	end := func() {}
	if sc.s.Track != nil {
		end = sc.s.Track()
	}
	result, err := sc.dispatch(ctx, m, call)
	end()
	sc.done(m.ID)
	resp := message{ID: m.ID}
	if err != nil {
		resp.Error = toError(err)
	} else if resp.Result, err = json.Marshal(result); err != nil {
		resp.Error = Errorf(CodeInternal, "encoding the result: %v", err)
	}
	if err := sc.fw.writeJSON(resp); err != nil && !connGone(err) {
		sc.s.logf("control: answering request %d: %v", m.ID, err)
	}
}

// connGone reports whether err only says the connection is no longer there:
// closed by this side as the sandbox stops, or by a client that went away
// without waiting for its answer. Neither is worth a line on stderr.
func connGone(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

func (sc *serverConn) dispatch(ctx context.Context, m message, call *serverCall) (any, error) {
	b := sc.s.backend
	switch m.Method {
	case MethodExec:
		var req ExecRequest
		if err := decodeParams(m.Params, &req); err != nil {
			return nil, err
		}
		return sc.exec(ctx, m.ID, req, call)
	case MethodSignal:
		var req SignalRequest
		if err := decodeParams(m.Params, &req); err != nil {
			return nil, err
		}
		return struct{}{}, sc.signal(req)
	case MethodReadFile:
		var req PathRequest
		if err := decodeParams(m.Params, &req); err != nil {
			return nil, err
		}
		w := &streamWriter{fw: sc.fw, id: m.ID, stream: StreamFile}
		info, err := b.ReadFile(ctx, req.Path, w)
		if err != nil {
			return nil, err
		}
		return info, w.eof()
	case MethodWriteFile:
		var req WriteFileRequest
		if err := decodeParams(m.Params, &req); err != nil {
			return nil, err
		}
		info, err := b.WriteFile(ctx, req, call.in)
		if err != nil {
			return nil, err
		}
		return info, nil
	case MethodCopyIn:
		var req CopyInRequest
		if err := decodeParams(m.Params, &req); err != nil {
			return nil, err
		}
		return b.CopyIn(ctx, req, call.in)
	case MethodCopyOut:
		var req PathRequest
		if err := decodeParams(m.Params, &req); err != nil {
			return nil, err
		}
		w := &streamWriter{fw: sc.fw, id: m.ID, stream: StreamFile}
		res, err := b.CopyOut(ctx, req.Path, w)
		if err != nil {
			return nil, err
		}
		return res, w.eof()
	case MethodCheckpoint:
		var req CheckpointRequest
		if err := decodeParams(m.Params, &req); err != nil {
			return nil, err
		}
		w := &streamWriter{fw: sc.fw, id: m.ID, stream: StreamFile}
		res, err := b.Checkpoint(ctx, req, w)
		if err != nil {
			return nil, err
		}
		return res, w.eof()
	case MethodStat:
		var req PathRequest
		if err := decodeParams(m.Params, &req); err != nil {
			return nil, err
		}
		return b.Stat(ctx, req.Path)
	case MethodWait:
		return b.Wait(ctx)
	case MethodStats:
		return b.Stats(ctx)
	case MethodShutdown:
		var req ShutdownRequest
		if err := decodeParams(m.Params, &req); err != nil {
			return nil, err
		}
		return struct{}{}, b.Shutdown(ctx, time.Duration(req.Grace))
	}
	return nil, Errorf(CodeUnsupported, "unknown method %q (this sandbox speaks %s version %d)", m.Method, ProtocolName, Version)
}

func (sc *serverConn) exec(ctx context.Context, id uint64, req ExecRequest, call *serverCall) (ExecResult, error) {
	if err := req.Validate(); err != nil {
		return ExecResult{}, Errorf(CodeInvalid, "%v", err)
	}
	stdout := &streamWriter{fw: sc.fw, id: id, stream: StreamStdout, win: call.out}
	stderr := &streamWriter{fw: sc.fw, id: id, stream: StreamStderr, win: call.out}
	stdio := Stdio{Stdout: stdout, Stderr: stderr}
	if req.Stdin {
		stdio.Stdin = call.in
	}
	start := time.Now()
	p, err := sc.s.backend.Exec(ctx, req, stdio)
	if err != nil {
		return ExecResult{}, err
	}
	sc.mu.Lock()
	call.process = p
	abandoned := sc.abandoned
	early := call.early
	call.early = nil
	sc.mu.Unlock()
	if abandoned {
		// The client went away while the command started, after abandon
		// looked for commands to kill.
		p.Signal(int(syscall.SIGKILL))
	}
	for _, req := range early {
		signalProcess(p, req)
	}

	var timedOut atomic.Bool
	if req.Timeout > 0 {
		timer := time.AfterFunc(time.Duration(req.Timeout), func() {
			timedOut.Store(true)
			p.Signal(int(syscall.SIGKILL))
		})
		defer timer.Stop()
	}
	code, sig, err := p.Wait()
	if err != nil {
		return ExecResult{}, err
	}
	if err := stdout.eof(); err != nil {
		return ExecResult{}, err
	}
	if err := stderr.eof(); err != nil {
		return ExecResult{}, err
	}
	// A command that ended by itself just as the timer fired did not
	// time out.
	killed := timedOut.Load() && sig == int(syscall.SIGKILL)
	return ExecResult{ExitCode: code, Signal: sig, TimedOut: killed, Duration: Duration(time.Since(start)), PID: p.PID()}, nil
}

func (sc *serverConn) signal(req SignalRequest) error {
	if req.Signal <= 0 || req.Signal > 64 {
		return Errorf(CodeInvalid, "signal %d is not a signal number (1..64)", req.Signal)
	}
	if req.Exec == 0 {
		if req.Descendants {
			return Errorf(CodeInvalid, "descendants applies to an exec's signal, and this one names none (exec 0 is init)")
		}
		return sc.s.backend.SignalInit(req.Signal)
	}
	sc.mu.Lock()
	call := sc.calls[req.Exec]
	if call != nil && call.isExec && call.process == nil {
		// Still starting: exec sends it once the command runs.
		call.early = append(call.early, req)
		sc.mu.Unlock()
		return nil
	}
	sc.mu.Unlock()
	if call == nil || call.process == nil {
		return Errorf(CodeNotFound, "no running exec with request id %d on this connection", req.Exec)
	}
	return signalProcess(call.process, req)
}

func signalProcess(p Process, req SignalRequest) error {
	if req.Descendants {
		return p.SignalDescendants(req.Signal)
	}
	return p.Signal(req.Signal)
}

// toError maps backend errors to protocol errors.
func toError(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, fs.ErrNotExist):
		return &Error{Code: CodeNotFound, Message: err.Error()}
	case errors.Is(err, fs.ErrInvalid):
		return &Error{Code: CodeInvalid, Message: err.Error()}
	case errors.Is(err, fs.ErrPermission):
		return &Error{Code: CodePermission, Message: err.Error()}
	case errors.Is(err, fs.ErrExist):
		return &Error{Code: CodeExists, Message: err.Error()}
	case errors.Is(err, syscall.EISDIR):
		return &Error{Code: CodeIsDir, Message: err.Error()}
	case errors.Is(err, syscall.ENOTDIR):
		return &Error{Code: CodeInvalid, Message: err.Error()}
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return &Error{Code: CodeNoSpace, Message: err.Error() + " (the sandbox's memory limit holds its root's and tmpfs' files too; give it more memory, or write large data to a volume)"}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeTimeout, Message: err.Error()}
	case errors.Is(err, context.Canceled):
		return &Error{Code: CodeUnavailable, Message: err.Error()}
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}
