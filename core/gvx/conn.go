package gvx

import (
	"net"
	"os"
)

// fileConn turns our end of the socket pair into a net.Conn; f is closed.
func fileConn(f *os.File) (net.Conn, error) {
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, withHostLimitHint("control socket", err)
	}
	return c, nil
}
