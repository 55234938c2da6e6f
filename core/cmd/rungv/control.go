package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"z.gfire.dev/gvx/core/host"
	"z.gfire.dev/gvx/core/netstack"
)

// controlSpec is a checked --control value: a socket path to bind, or an
// inherited descriptor.
type controlSpec struct {
	spec string // as given, for errors
	path string // unix:PATH
	fd   int    // fd:N
}

// parseControl checks --control before anything is pulled or booted.
func parseControl(spec string) (controlSpec, error) {
	c := controlSpec{spec: spec}
	switch {
	case spec == "":
		return c, nil
	case strings.HasPrefix(spec, "unix:"):
		c.path = strings.TrimPrefix(spec, "unix:")
		if err := checkSocketPath(c.path); err != nil {
			return c, fmt.Errorf("--control %s: %w", spec, err)
		}
		if _, err := os.Lstat(c.path); err == nil {
			return c, fmt.Errorf("--control %s: the path exists; remove it or pick another (is another sandbox using it?)", spec)
		}
		if err := checkParentDir(c.path); err != nil {
			return c, fmt.Errorf("--control %s: %w", spec, err)
		}
		return c, nil
	case strings.HasPrefix(spec, "fd:"):
		n, err := strconv.Atoi(strings.TrimPrefix(spec, "fd:"))
		if err != nil || n < 3 {
			return c, fmt.Errorf("--control %s: want fd:N with N >= 3, an inherited connected socket", spec)
		}
		c.fd = n
		return c, nil
	}
	return c, fmt.Errorf("--control %q: use unix:PATH or fd:N", spec)
}

// controlEndpoint is where clients reach the control server.
type controlEndpoint struct {
	host.Control
	file *janitorFile // the socket file of unix:PATH, for the janitor
}

// openControl binds or takes over the endpoint c names.
func openControl(c controlSpec) (*controlEndpoint, error) {
	switch {
	case c.path != "":
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: c.path, Net: "unix"})
		if err != nil {
			return nil, fmt.Errorf("--control %s: %w; pick a path in a directory rungv can write", c.spec, err)
		}
		// After lockdown unlink is denied; the janitor removes the file.
		l.SetUnlinkOnClose(false)
		if err := os.Chmod(c.path, 0o600); err != nil {
			l.Close()
			os.Remove(c.path)
			return nil, err
		}
		id, err := identify(c.path)
		if err != nil {
			l.Close()
			os.Remove(c.path)
			return nil, err
		}
		return &controlEndpoint{Control: host.Control{Listener: l}, file: &id}, nil
	case c.fd != 0:
		file := os.NewFile(uintptr(c.fd), "control")
		conn, err := net.FileConn(file)
		file.Close()
		if err != nil {
			return nil, fmt.Errorf("--control %s: %w (pass a connected unix socket)", c.spec, err)
		}
		return &controlEndpoint{Control: host.Control{Conn: conn}}, nil
	}
	return &controlEndpoint{}, nil
}

// close stops listening; the janitor removes the socket file when rungv
// exits.
func (c *controlEndpoint) close() {
	if c.Listener != nil {
		c.Listener.Close()
	}
	if c.Conn != nil {
		c.Conn.Close()
	}
}

// checkSocketPath checks a unix socket path a flag names before anything
// binds or dials it: the kernel refuses one too long for sun_path with
// EINVAL, which says neither which flag nor what to give.
func checkSocketPath(path string) error {
	switch {
	case path == "":
		return errors.New("the socket path is empty; give one, e.g. /tmp/box.sock")
	case len(path) > netstack.MaxUnixPath:
		return fmt.Errorf("the path is %d bytes, more than the %d a unix socket's address holds (sun_path); pick a shorter path, e.g. in /tmp", len(path), netstack.MaxUnixPath)
	}
	return nil
}

// checkParentDir checks that the directory a file is to be made in
// exists, for the flags that name a file rungv creates.
func checkParentDir(path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("the directory %s does not exist; create it or pick a path in an existing directory", dir)
	case err != nil:
		return err
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory; pick a path in a directory", dir)
	}
	return nil
}
