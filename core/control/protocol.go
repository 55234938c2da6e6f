// Package control is the one protocol between a rungv process and its
// clients (the Go SDK, libgvx and through it Python, and the rungv CLI).
//
// A client connects over a stream socket (a unix socket path given with
// `rungv run --control unix:PATH`, or a socket inherited by the child) and
// exchanges frames:
//
//	frame   = length:uint32be payload[length]
//	payload = 'J' json-message | 'D' data
//	data    = id:uvarint stream:uint8 flags:uint8 bytes
//
// JSON messages are a hello/welcome handshake, then requests
// {"id":N,"method":M,"params":{…}} and responses {"id":N,"result":{…}} or
// {"id":N,"error":{"code":C,"message":…}}. Byte streams — a command's stdin,
// stdout and stderr, file contents — travel as data frames tagged with their
// request's id, so they are never base64-encoded and never limited by one
// message's size. For a request, every data frame the server sends comes
// before its response. Requests are independent: a client may have many in
// flight (many concurrent execs into one sandbox).
//
// An exec's output is flow-controlled when the client's hello offers a
// window (Hello.OutputWindow) and the welcome accepts it: the server then
// sends at most that many bytes of an exec's stdout and stderr, together,
// beyond what the client has given back with credit frames (StreamCredit)
// as it passed them on, each frame counting FrameCredit more than its
// bytes. A client that is slow to take one exec's output so holds up that
// command, as a full pipe would, and neither its other requests nor its
// memory.
//
// The protocol is versioned: the hello carries the client's major version,
// and a server refuses a major version it does not speak.
package control

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"z.gfire.dev/gvx/core/report"
	"z.gfire.dev/gvx/core/spec"
)

// Version is the protocol's major version. Version 2: an exec's timeout
// travels in seconds, as spec.Exec's JSON has it. Version 3: a signal may
// spare the exec's command (SignalRequest.Descendants), which a version 2
// sandbox would ignore and kill a session's shell.
const Version = 3

// ProtocolName identifies the protocol in the handshake.
const ProtocolName = "gvx-control"

// MaxFrame bounds a frame's payload; larger frames are refused (data is
// split into frames of at most MaxData bytes).
const (
	MaxFrame = 1 << 20
	MaxData  = MaxFrame - 64
)

const (
	kindJSON = 'J'
	kindData = 'D'
)

// Stream numbers of data frames.
const (
	StreamStdin  = 0
	StreamStdout = 1
	StreamStderr = 2
	// StreamFile carries a file's content (ReadFile, WriteFile) or a tar
	// stream (CopyIn, CopyOut).
	StreamFile = 3
	// StreamCredit, from the client, gives back window for an exec's
	// output: its bytes are a uvarint count of output bytes the client
	// has passed on. With FlagEOF it says the client takes no more of the
	// exec's output (it stopped waiting for it), which the server then
	// drops.
	StreamCredit = 4
)

// FrameCredit is what a data frame of flow-controlled output takes from
// the window beyond its bytes, so that the window bounds what a client
// keeps per frame too: a command writing a byte at a time fills it as one
// writing large blocks does.
const FrameCredit = 256

// Data frame flags.
const (
	// FlagEOF marks the last frame of a stream (it may carry bytes).
	FlagEOF = 1
	// FlagAbort, with FlagEOF, says the stream ended because its source
	// failed: the file or archive it carried is incomplete, and the
	// request fails instead of keeping a truncated copy.
	FlagAbort = 2
)

// ErrStreamAborted is what a backend reads from a stream its client
// aborted (FlagAbort).
var ErrStreamAborted = errors.New("the client's data stream failed before its end")

// Methods.
const (
	MethodExec      = "exec"
	MethodSignal    = "signal"
	MethodReadFile  = "read_file"
	MethodWriteFile = "write_file"
	MethodStat      = "stat"
	MethodWait      = "wait"
	MethodShutdown  = "shutdown"
	MethodStats     = "stats"
	MethodCopyIn    = "copy_in"
	MethodCopyOut   = "copy_out"
	// MethodCheckpoint streams a snapshot of the sandbox on StreamFile.
	MethodCheckpoint = "checkpoint"
)

// Error codes.
const (
	CodeInvalid     = "invalid"      // a bad argument; the message names it
	CodeNotFound    = "not_found"    // no such file or exec (a missing command exits 127)
	CodePermission  = "permission"   // denied inside the sandbox
	CodeUnavailable = "unavailable"  // the sandbox is shutting down or gone
	CodeUnsupported = "unsupported"  // unknown method or version
	CodeInternal    = "internal"     // a bug; the message says where
	CodeTimeout     = "timeout"      // a deadline passed
	CodeExists      = "exists"       // a file exists where it must not
	CodeIsDir       = "is_directory" // a directory where a file was expected
	CodeNoSpace     = "no_space"     // the sandbox's file system or memory limit is full
)

// Hello is the client's first message.
type Hello struct {
	Protocol string `json:"protocol"`
	Version  int    `json:"version"`
	Client   string `json:"client,omitempty"`
	// OutputWindow, if set, asks for flow control of each exec's output
	// with a window of this many bytes (see the package comment).
	OutputWindow int `json:"output_window,omitempty"`
}

// Welcome answers Hello.
type Welcome struct {
	Protocol string      `json:"protocol"`
	Version  int         `json:"version"`
	Sandbox  SandboxInfo `json:"sandbox"`
	Error    *Error      `json:"error,omitempty"`
	// OutputWindow is the Hello's, if the server accepts it: each exec's
	// output is flow-controlled. 0: it is not (a server from before flow
	// control).
	OutputWindow int `json:"output_window,omitempty"`
}

// What a sandbox reports travels as core/report defines it: the SDK
// returns the same types, so that its callers need not this package.
type (
	SandboxInfo      = report.SandboxInfo
	PublishedPort    = report.PublishedPort
	FileInfo         = report.FileInfo
	Stats            = report.Stats
	CopyResult       = report.CopyResult
	CheckpointResult = report.CheckpointResult
)

// message is a request or a response on the wire.
type message struct {
	ID     uint64          `json:"id"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// Error is an error a request ended with.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with the given code.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// IsCode reports whether err is an *Error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// ExecRequest starts a command in the sandbox: what runs (spec.Exec, whose
// fields travel inline) and how the client streams it.
type ExecRequest struct {
	spec.Exec
	// Stdin says whether the client streams stdin (data frames on
	// StreamStdin ending with FlagEOF); otherwise stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// TTY gives the command a terminal; its output all arrives on stdout.
	TTY bool `json:"tty,omitempty"`
}

// ExecResult is how a command ended.
type ExecResult struct {
	// ExitCode is the exit status, or 128+N if signal N killed it.
	ExitCode int `json:"exit_code"`
	// Signal is the signal that killed it, 0 if it exited.
	Signal int `json:"signal,omitempty"`
	// TimedOut is set if the request's timeout killed it.
	TimedOut bool     `json:"timed_out,omitempty"`
	Duration Duration `json:"duration"`
	PID      int      `json:"pid,omitempty"` // in the sandbox
}

// SignalRequest sends a signal to a running exec (by its request id) or, with
// Exec 0, to the sandbox's init process.
type SignalRequest struct {
	Exec   uint64 `json:"exec"`
	Signal int    `json:"signal"`
	// Descendants signals only what the exec's command started, not the
	// command itself: a terminal's ^C to the job a shell runs, which the
	// shell survives (Process.SignalDescendants). Only with Exec.
	Descendants bool `json:"descendants,omitempty"`
}

// PathRequest names a file in the sandbox.
type PathRequest struct {
	Path string `json:"path"`
}

// WriteFileRequest writes a file; its content follows as data frames on
// StreamFile ending with FlagEOF. The file appears whole or not at all: a
// failed request leaves the path as it was. An existing file is replaced
// by a new one, so its mode, owner and other hard links do not carry
// over; a symlink at Path is followed.
type WriteFileRequest struct {
	Path string `json:"path"`
	// Mode is the file's permission bits (default 0644).
	Mode uint32 `json:"mode,omitempty"`
	// MakeParents creates missing parent directories (0755).
	MakeParents bool `json:"make_parents,omitempty"`
	// Owner is who the file, and the directories MakeParents makes,
	// belong to: "uid[:gid]" or "name[:group]", resolved as
	// ExecRequest.User is; "" means root.
	Owner string `json:"owner,omitempty"`
}

// CopyInRequest extracts a tar stream into the directory Path; the stream
// follows as data frames on StreamFile ending with FlagEOF.
type CopyInRequest struct {
	Path string `json:"path"`
	// Owner, if set, owns every entry made instead of the archive's
	// owners, and the missing directories made on the way (otherwise
	// root's): "uid[:gid]" or "name[:group]", resolved as ExecRequest.User
	// is.
	Owner string `json:"owner,omitempty"`
}

// CheckpointRequest asks for a snapshot of the running sandbox, which
// `rungv run --restore` continues in a new process. The snapshot follows
// as data frames on StreamFile ending with FlagEOF.
type CheckpointRequest struct {
	// Stop ends the sandbox once the snapshot is written, without letting
	// the guest run again; a sandbox with volumes must stop, so that their
	// images keep the snapshot's state (clone them for each restore).
	Stop bool `json:"stop,omitempty"`
}

// WaitResult is how the sandbox's init process ended.
type WaitResult struct {
	ExitCode int `json:"exit_code"`
	Signal   int `json:"signal,omitempty"`
}

// ShutdownRequest stops the sandbox: SIGTERM to init, then after Grace
// SIGKILL to everything.
type ShutdownRequest struct {
	Grace Duration `json:"grace,omitempty"`
}

// Duration is a time.Duration that travels as milliseconds.
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(float64(time.Duration(d)) / float64(time.Millisecond))
}

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var ms float64
	if err := json.Unmarshal(b, &ms); err != nil {
		return fmt.Errorf("a duration is a number of milliseconds: %w", err)
	}
	*d = Duration(ms * float64(time.Millisecond))
	return nil
}

// frameReader reads frames from a connection.
type frameReader struct {
	r   *bufio.Reader
	buf []byte
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10), buf: make([]byte, MaxFrame)}
}

// next returns the next frame's payload, valid until the next call.
func (fr *frameReader) next() ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > MaxFrame {
		return nil, fmt.Errorf("control: frame of %d bytes (the limit is %d): the peer does not speak %s", n, MaxFrame, ProtocolName)
	}
	p := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return p, nil
}

// dataFrame is a parsed data frame.
type dataFrame struct {
	id     uint64
	stream uint8
	flags  uint8
	data   []byte
}

func parseData(p []byte) (dataFrame, error) {
	id, n := binary.Uvarint(p[1:])
	if n <= 0 || len(p) < 1+n+2 {
		return dataFrame{}, errors.New("control: malformed data frame")
	}
	rest := p[1+n:]
	return dataFrame{id: id, stream: rest[0], flags: rest[1], data: rest[2:]}, nil
}

func appendFrameHeader(b []byte, kind byte, payloadLen int) []byte {
	var hdr [5]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(payloadLen+1))
	hdr[4] = kind
	return append(b, hdr[:]...)
}

func encodeJSON(v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(body)+1 > MaxFrame {
		return nil, fmt.Errorf("control: message of %d bytes exceeds the frame limit", len(body))
	}
	b := appendFrameHeader(make([]byte, 0, 5+len(body)), kindJSON, len(body))
	return append(b, body...), nil
}

// encodeData encodes one data frame; len(data) must be at most MaxData.
func encodeData(b []byte, id uint64, stream, flags uint8, data []byte) []byte {
	var idb [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(idb[:], id)
	b = appendFrameHeader(b, kindData, n+2+len(data))
	b = append(b, idb[:n]...)
	b = append(b, stream, flags)
	return append(b, data...)
}
