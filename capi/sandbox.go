package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"

	"z.gfire.dev/gvx/core/gvx"
	"z.gfire.dev/gvx/core/spec"
)

func sandboxNew(configJSON string) (uint64, error) {
	// gvx_sandbox_new's config_json is the SDK's Config: the sandbox's
	// spec and how to start it, with the same keys.
	var cfg gvx.Config
	if err := decodeJSON("config", configJSON, &cfg); err != nil {
		return 0, err
	}
	// The sandbox's own output, if any, goes where the caller's goes.
	cfg.Stdout, cfg.Stderr = os.Stdout, os.Stderr
	sb, err := startSandbox(cfg)
	if err != nil {
		return 0, err
	}
	return addSandbox(sb), nil
}

// startSandbox starts a sandbox; a failure is GVX_E_START but for a spec
// the SDK refused, which is the caller's argument at fault.
func startSandbox(cfg gvx.Config) (*gvx.Sandbox, error) {
	sb, err := gvx.New(context.Background(), cfg)
	if err != nil {
		var se *statusError
		if errors.As(err, &se) || errors.As(err, new(*spec.FieldError)) {
			return nil, err
		}
		return nil, &statusError{statusStart, err}
	}
	return sb, nil
}

// sandboxReset starts a fresh sandbox from the handle's configuration and
// closes the old one: the root filesystem's writes and every process are
// gone; volumes keep what was written to them. The fresh one starts
// first, so that a failed start leaves the handle as it was.
func sandboxReset(h uint64) error {
	old, err := getSandbox(h)
	if err != nil {
		return err
	}
	fresh, err := startSandbox(old.Config())
	if err != nil {
		return err
	}
	if old, err = replaceSandbox(h, fresh); err != nil {
		fresh.Close()
		return err
	}
	// The reset is done: the handle holds the fresh sandbox. That the old
	// one did not stop cleanly (gvx.ErrStopFailed) is not the reset's
	// failure, and a failure status would read as one.
	old.Close()
	return nil
}

type sandboxInfoJSON struct {
	ID       string              `json:"id"`
	PID      int                 `json:"pid"`
	Image    string              `json:"image"`
	Hostname string              `json:"hostname"`
	Platform string              `json:"platform"`
	Spinning bool                `json:"spinning"`
	Rungv    string              `json:"rungv"`
	Ports    []gvx.PublishedPort `json:"ports"`
}

func sandboxInfo(h uint64) (string, error) {
	sb, err := getSandbox(h)
	if err != nil {
		return "", err
	}
	i := sb.Info()
	ports := i.Ports
	if ports == nil {
		ports = []gvx.PublishedPort{}
	}
	return encodeJSON(sandboxInfoJSON{i.ID, sb.PID(), i.Image, i.Hostname, i.Platform, i.Spinning, i.Rungv, ports}), nil
}

// execRequest is gvx_sandbox_exec's request_json: what runs, as spec.Exec
// has it, and how the caller takes it.
type execRequest struct {
	spec.Exec
	MaxOutput int    `json:"max_output"`
	Cancel    uint64 `json:"cancel"`
}

type execResult struct {
	ExitCode  int     `json:"exit_code"`
	Signal    int     `json:"signal"`
	TimedOut  bool    `json:"timed_out"`
	Truncated bool    `json:"truncated"`
	Duration  float64 `json:"duration"`
}

// outputFunc receives streamed output (stream 1 or 2).
type outputFunc func(stream int, data []byte)

type streamWriter struct {
	stream int
	fn     outputFunc
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.fn(w.stream, p)
	return len(p), nil
}

// sandboxExec runs a command; with onOutput nil the output is captured
// and returned.
func sandboxExec(h uint64, requestJSON string, stdin []byte, onOutput outputFunc) (string, []byte, []byte, error) {
	sb, err := getSandbox(h)
	if err != nil {
		return "", nil, nil, err
	}
	var req execRequest
	if err := decodeJSON("request", requestJSON, &req); err != nil {
		return "", nil, nil, err
	}
	if req.MaxOutput < 0 {
		return "", nil, nil, invalid(`request: "max_output" must not be negative`)
	}
	ctx, err := tokenContext(req.Cancel)
	if err != nil {
		return "", nil, nil, err
	}
	opts := &gvx.ExecOptions{Exec: req.Exec, MaxOutput: req.MaxOutput}
	if stdin != nil {
		opts.Stdin = bytes.NewReader(stdin)
	}
	if onOutput != nil {
		opts.Stdout = streamWriter{1, onOutput}
		opts.Stderr = streamWriter{2, onOutput}
	}
	res, err := sb.Exec(ctx, nil, opts)
	if err != nil {
		return "", nil, nil, err
	}
	out := execResult{res.ExitCode, res.Signal, res.TimedOut, res.Truncated, res.Duration.Seconds()}
	return encodeJSON(out), res.Stdout, res.Stderr, nil
}

func sandboxStats(h uint64) (string, error) {
	sb, err := getSandbox(h)
	if err != nil {
		return "", err
	}
	st, err := sb.Stats(context.Background())
	if err != nil {
		return "", err
	}
	return encodeJSON(st), nil
}

// fileInfoJSON is gvx_sandbox_stat's answer.
type fileInfoJSON struct {
	Path  string  `json:"path"`
	Mode  uint32  `json:"mode"`
	Size  int64   `json:"size"`
	UID   uint32  `json:"uid"`
	GID   uint32  `json:"gid"`
	Mtime float64 `json:"mtime"`
}

func sandboxStat(h uint64, path string) (string, error) {
	sb, err := getSandbox(h)
	if err != nil {
		return "", err
	}
	fi, err := sb.Stat(context.Background(), path)
	if err != nil {
		return "", err
	}
	return encodeJSON(fileInfoJSON{fi.Path, fi.Mode, fi.Size, fi.UID, fi.GID, float64(fi.Mtime.UnixNano()) / 1e9}), nil
}

func sandboxReadFile(h uint64, path string) ([]byte, error) {
	sb, err := getSandbox(h)
	if err != nil {
		return nil, err
	}
	return sb.ReadFile(context.Background(), path)
}

// writeMakeParents is GVX_WRITE_MAKE_PARENTS.
const writeMakeParents = 1 << 16

// sandboxWriteFile writes data to path; owner "" is root.
func sandboxWriteFile(h uint64, path string, data []byte, mode uint32, owner string) error {
	sb, err := getSandbox(h)
	if err != nil {
		return err
	}
	opts := gvx.WriteOptions{Mode: fs.FileMode(mode &^ writeMakeParents), MakeParents: mode&writeMakeParents != 0, Owner: owner}
	_, err = sb.WriteFile(context.Background(), path, bytes.NewReader(data), opts)
	return err
}

// sandboxUpload streams the host file or directory hostPath into the
// sandbox at path. mode < 0 keeps the host file's permission bits; owner
// "" is root.
func sandboxUpload(h uint64, hostPath, path string, mode int32, owner string) error {
	sb, err := getSandbox(h)
	if err != nil {
		return err
	}
	opts := gvx.UploadOptions{Owner: owner}
	if mode >= 0 {
		m := fs.FileMode(mode)
		opts.Mode = &m
	}
	return sb.Upload(context.Background(), hostPath, path, opts)
}

func sandboxDownload(h uint64, path, hostPath string) error {
	sb, err := getSandbox(h)
	if err != nil {
		return err
	}
	return sb.Download(context.Background(), path, hostPath)
}

// checkpointStop is GVX_CHECKPOINT_STOP.
const checkpointStop = 1 << 0

func sandboxCheckpoint(h uint64, hostPath string, flags uint32) error {
	sb, err := getSandbox(h)
	if err != nil {
		return err
	}
	if flags&^checkpointStop != 0 {
		return invalid("checkpoint flags %#x: only GVX_CHECKPOINT_STOP is defined", flags)
	}
	_, err = sb.Checkpoint(context.Background(), hostPath, gvx.CheckpointOptions{Stop: flags&checkpointStop != 0})
	return err
}

func sandboxSignal(h uint64, sig int) error {
	sb, err := getSandbox(h)
	if err != nil {
		return err
	}
	return sb.Signal(context.Background(), syscall.Signal(sig))
}

func sandboxWait(h uint64) (int, error) {
	sb, err := getSandbox(h)
	if err != nil {
		return 0, err
	}
	return sb.Run(context.Background())
}

func sandboxClose(h uint64) error {
	sb, err := takeSandbox(h)
	if err != nil {
		return err
	}
	return sb.Close()
}

var _ io.Writer = streamWriter{}
