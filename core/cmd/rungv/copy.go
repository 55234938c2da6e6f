package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/spf13/pflag"

	"z.gfire.dev/gvx/core/host"
	"z.gfire.dev/gvx/core/internal/hosttar"
)

const copyUsage = "copy a host directory's contents into the sandbox before the command starts: `HOSTDIR:GUESTDIR` " +
	"(GUESTDIR made if missing; a copy, not a mount, as the SDK's upload makes it; the files belong to the command's user)"

// addCopyFlags registers --copy.
func addCopyFlags(fl *pflag.FlagSet, copies *[]string) {
	fl.StringArrayVar(copies, "copy", nil, copyUsage)
}

// parseCopies parses and checks each --copy value. Every host tree is
// walked now, so that a missing or unreadable one fails before the image
// is pulled, and before anything reaches the sandbox.
func parseCopies(values []string) ([]host.Copy, error) {
	var copies []host.Copy
	for _, v := range values {
		c, err := parseCopy(v)
		if err != nil {
			return nil, fmt.Errorf("--copy %s: %w", v, err)
		}
		copies = append(copies, c)
	}
	return copies, nil
}

// parseCopy parses one HOSTDIR:GUESTDIR. The guest path is absolute, so
// the last ':' splits them; a host path may hold ':'.
func parseCopy(v string) (host.Copy, error) {
	i := strings.LastIndex(v, ":")
	if i < 0 {
		return host.Copy{}, errors.New("names no guest directory; write HOSTDIR:GUESTDIR, e.g. --copy ./src:/work")
	}
	c := host.Copy{HostDir: v[:i], GuestDir: v[i+1:]}
	switch {
	case c.HostDir == "":
		return c, errors.New("names no host directory; write HOSTDIR:GUESTDIR, e.g. --copy ./src:/work")
	case !path.IsAbs(c.GuestDir):
		return c, fmt.Errorf("%q is not an absolute path in the sandbox; write HOSTDIR:GUESTDIR, e.g. --copy ./src:/work", c.GuestDir)
	}
	c.GuestDir = path.Clean(c.GuestDir)
	st, err := os.Stat(c.HostDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return c, fmt.Errorf("the host directory %s does not exist; give one that does", c.HostDir)
	case err != nil:
		return c, fmt.Errorf("the host directory: %w; give one you can read", err)
	case !st.IsDir():
		return c, fmt.Errorf("%s is a file, not a directory: give a directory, whose contents --copy copies (put the file in one of its own)", c.HostDir)
	}
	if err := hosttar.Check(c.HostDir); err != nil {
		if ue := (*hosttar.UnsupportedError)(nil); errors.As(err, &ue) {
			return c, fmt.Errorf("%w: remove it, or give a directory without one", err)
		}
		return c, fmt.Errorf("reading the host directory: %w; give one you can read", err)
	}
	return c, nil
}
