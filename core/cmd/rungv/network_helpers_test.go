package main

// Helpers the network tests share: their image, a run, a socket's removal.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/eventually"
	"z.gfire.dev/gvx/core/internal/testimage"
)

// The network tests run real sandboxes, locked down as always, and talk
// only to servers on 127.0.0.1. Every NAT sandbox gets --dns-upstream
// pointing at a test server: no query reaches the host's resolvers.

var netImage struct {
	once  sync.Once
	cache string
	ref   string
	err   error
}

// netTestImage returns a cache with the test image pulled, shared by the
// network tests.
func netTestImage(t *testing.T) (cache, ref string) {
	t.Helper()
	netImage.once.Do(func() {
		b, err := testimage.Build()
		if err != nil {
			netImage.err = err
			return
		}
		netImage.cache = filepath.Join(filepath.Dir(rungvBinary), "net-cache")
		netImage.ref = b.LayoutRef()
		cmd := exec.Command(rungvBinary, "--cache", netImage.cache, "pull", "-q", netImage.ref)
		if out, err := cmd.CombinedOutput(); err != nil {
			netImage.err = fmt.Errorf("pull: %v\n%s", err, out)
		}
	})
	if netImage.err != nil {
		t.Fatal(netImage.err)
	}
	return netImage.cache, netImage.ref
}

// runNet runs a shell script in a sandbox with the given rungv flags.
func runNet(t *testing.T, flags []string, script string) (string, string, int) {
	t.Helper()
	cache, ref := netTestImage(t)
	args := append([]string{"run"}, flags...)
	args = append(args, ref, "sh", "-c", script)
	return rungv(t, cache, args...)
}

// waitGone waits until path no longer exists.
func waitGone(t *testing.T, path string) {
	t.Helper()
	eventually.Within(t, 5*time.Second, path+" removed", func() (bool, error) {
		_, err := os.Lstat(path)
		return os.IsNotExist(err), err
	})
}
