package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"os"
	"syscall"
	"time"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/gvx"
	"z.gfire.dev/gvx/core/spec"
)

// sandboxConfig is gvx_sandbox_new's config_json: the sandbox's spec and
// how to start it.
type sandboxConfig struct {
	spec.Sandbox
	Rungv    string `json:"rungv"`
	Cache    string `json:"cache"`
	Insecure bool   `json:"insecure"`
}

// toGo checks the spec (spec.Sandbox.Validate, which names the field)
// and converts it to the SDK's configuration.
func (c *sandboxConfig) toGo() (gvx.Config, error) {
	sp := &c.Sandbox
	if err := sp.Validate(); err != nil {
		return gvx.Config{}, invalid("config: %v", err)
	}
	cfg := gvx.Config{
		OCIImage:   sp.Image,
		Cmd:        sp.Cmd,
		Envv:       sp.Env,
		WorkingDir: sp.Workdir,
		User:       sp.User,
		Hostname:   sp.Hostname,
		KeepAlive:  sp.KeepAlive,
		Restore:    sp.Restore,
		Resources: gvx.Resources{
			MemoryBytes: sp.Memory,
			// Clamped so that the conversion cannot overflow; rungv
			// refuses counts past its maximum, naming it.
			CPUMillis: int(math.Min(sp.CPUs, 1<<20) * 1000),
			CPUSet:    sp.CPUSet,
			PidsLimit: sp.PidsLimit,
		},
		Timeout:                time.Duration(sp.Timeout),
		AllowNet:               sp.AllowNet,
		HostLoopback:           sp.HostLoopback,
		NetRaw:                 sp.NetRaw,
		NFTables:               sp.NFTables,
		AllowPacketSocketWrite: sp.AllowPacketSocketWrite,
		AllowSUID:              sp.AllowSUID,
		Rungv:                  c.Rungv,
		Cache:                  c.Cache,
		Insecure:               c.Insecure,
	}
	if sp.Entrypoint != nil {
		cfg.Entrypoint, cfg.EntrypointSet = *sp.Entrypoint, true
	}
	if sp.Platform != "auto" {
		cfg.Platform = gvx.Platform(sp.Platform)
	}
	switch {
	case sp.Spin == nil:
		cfg.Spin = gvx.SpinAuto
	case *sp.Spin:
		cfg.Spin = gvx.SpinOn
	default:
		cfg.Spin = gvx.SpinOff
	}
	if sp.Network == spec.NetworkNAT {
		cfg.NetworkMode = gvx.NetModeNAT
	}
	for _, p := range sp.Ports {
		cfg.Ports = append(cfg.Ports, gvx.PortMapping{HostPath: p.HostPath, HostIP: p.HostIP, HostPort: p.HostPort, GuestPort: p.GuestPort, Protocol: p.Protocol})
	}
	for _, m := range sp.Mounts {
		cfg.Mounts = append(cfg.Mounts, gvx.Mount{Kind: gvx.MountVolume, ImagePath: m.Source, GuestPath: m.Target, ReadOnly: m.ReadOnly})
	}
	return cfg, nil
}

func sandboxNew(configJSON string) (uint64, error) {
	var c sandboxConfig
	if err := decodeJSON("config", configJSON, &c); err != nil {
		return 0, err
	}
	cfg, err := c.toGo()
	if err != nil {
		return 0, err
	}
	// The sandbox's own output, if any, goes where the caller's goes.
	cfg.Stdout, cfg.Stderr = os.Stdout, os.Stderr
	sb, err := startSandbox(cfg)
	if err != nil {
		return 0, err
	}
	return addSandbox(sb, cfg), nil
}

func startSandbox(cfg gvx.Config) (*gvx.Sandbox, error) {
	sb, err := gvx.New(context.Background(), cfg)
	if err != nil {
		var se *statusError
		if errors.As(err, &se) {
			return nil, err
		}
		return nil, &statusError{statusStart, err}
	}
	return sb, nil
}

// sandboxReset starts a fresh sandbox from the handle's configuration and
// closes the old one: the root filesystem's writes and every process are
// gone; volumes keep what was written to them.
func sandboxReset(h uint64) error {
	hd, err := getHandle(h)
	if err != nil {
		return err
	}
	fresh, err := startSandbox(hd.cfg)
	if err != nil {
		return err
	}
	old, err := replaceSandbox(h, fresh)
	if err != nil {
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
	ID       string                  `json:"id"`
	PID      int                     `json:"pid"`
	Image    string                  `json:"image"`
	Hostname string                  `json:"hostname"`
	Platform string                  `json:"platform"`
	Spinning bool                    `json:"spinning"`
	Rungv    string                  `json:"rungv"`
	Ports    []control.PublishedPort `json:"ports"`
}

func sandboxInfo(h uint64) (string, error) {
	sb, err := getSandbox(h)
	if err != nil {
		return "", err
	}
	i := sb.Info()
	ports := i.Ports
	if ports == nil {
		ports = []control.PublishedPort{}
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
	if err := req.Validate(); err != nil {
		return "", nil, nil, invalid("request: %v", err)
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
	makeParents := mode&writeMakeParents != 0
	mode &^= writeMakeParents
	if mode&^0o7777 != 0 {
		return invalid("mode %#o has bits beyond the permission bits (07777) and GVX_WRITE_MAKE_PARENTS", mode)
	}
	if mode == 0 {
		mode = 0o644
	}
	_, err = sb.WriteFileWith(context.Background(), control.WriteFileRequest{Path: path, Mode: mode, MakeParents: makeParents, Owner: owner}, bytes.NewReader(data))
	return err
}

// sandboxUpload streams the host file hostPath into the sandbox at path.
// mode < 0 keeps the host file's permission bits; owner "" is root.
func sandboxUpload(h uint64, hostPath, path string, mode int32, owner string) error {
	sb, err := getSandbox(h)
	if err != nil {
		return err
	}
	if mode > 0o7777 {
		return invalid("mode %#o has bits beyond the permission bits (07777); give -1 to keep the host file's", mode)
	}
	if st, err := os.Stat(hostPath); err == nil && st.IsDir() {
		if mode >= 0 {
			return invalid("mode %#o is for a file, and %s is a directory: give -1, its files keep their own", mode, hostPath)
		}
		_, err := sb.UploadDirWith(context.Background(), hostPath, control.CopyInRequest{Path: path, Owner: owner})
		return err
	}
	f, err := os.Open(hostPath)
	if err != nil {
		return invalid("host file %s: %v", hostPath, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return invalid("host file %s is not a regular file", hostPath)
	}
	perm := os.FileMode(mode)
	if mode < 0 {
		perm = st.Mode().Perm() | st.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)
	}
	_, err = sb.WriteFileWith(context.Background(), control.WriteFileRequest{Path: path, Mode: uint32(perm.Perm()), Owner: owner}, f)
	if se := (*control.SourceError)(nil); errors.As(err, &se) {
		return invalid("host file %s could not be read, so nothing was written: %v", hostPath, se.Err)
	}
	return err
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
	if sig <= 0 || sig > 64 {
		return invalid("signal %d is not a signal number (1..64)", sig)
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
