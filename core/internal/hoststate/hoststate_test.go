package hoststate

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSnapshotSeesChanges makes on the host, for real, one change of each
// kind a snapshot compares that a test may make safely — a file outside
// the excluded paths, TCP, UDP and unix listeners, a key — and checks that
// Diff names each, and nothing under the excluded directory.
func TestSnapshotSeesChanges(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "hoststate-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	own := filepath.Join(dir, "own")
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	before, err := Snapshot(t.Logf, own)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "planted"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(filepath.Join(dir, "planted"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(own, "ignored"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	ux, err := net.Listen("unix", filepath.Join(dir, "l.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ux.Close()
	ownUx, err := net.Listen("unix", filepath.Join(own, "l.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ownUx.Close()
	desc := fmt.Sprintf("hoststate-test-%d", time.Now().UnixNano())
	id, keyErr := unix.AddKey("user", desc, []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
	if keyErr == nil {
		defer unix.KeyctlInt(unix.KEYCTL_UNLINK, id, unix.KEY_SPEC_PROCESS_KEYRING, 0, 0)
	}
	after, err := Snapshot(t.Logf, own)
	if err != nil {
		t.Fatal(err)
	}
	diff := strings.Join(before.Diff(after), "\n")
	t.Logf("diff:\n%s", diff)
	want := []string{
		"+ " + filepath.Join(dir, "planted") + "  file 4755 0:0 1 bytes",
		"+ tcp " + tcp.Addr().String(),
		"+ udp " + udp.LocalAddr().String(),
		"+ unix " + filepath.Join(dir, "l.sock"),
	}
	if keyErr == nil {
		want = append(want, desc)
	} else {
		t.Logf("not checking keys: add_key: %v", keyErr)
	}
	for _, w := range want {
		if !strings.Contains(diff, w) {
			t.Errorf("the diff lacks %q", w)
		}
	}
	if strings.Contains(diff, own) {
		t.Errorf("the diff names the excluded directory %s", own)
	}
}

func TestClockMoved(t *testing.T) {
	if _, moved := clockMoved("1000000000", "1200000000"); moved {
		t.Error("200 ms of drift reported as a moved clock")
	}
	c, moved := clockMoved("1000000000", "-86400000000000")
	if !moved || !strings.Contains(c.String(), "moved by -24h0m1s") {
		t.Errorf("the clock set back a day: %v %q", moved, c)
	}
}

func TestPersistentKeepsOnlyRepeatedChanges(t *testing.T) {
	a := lineDiff("files", "/x\t1\n/y\t1", "/x\t2\n/z\t1")
	b := lineDiff("files", "/x\t2\n/w\t1", "/x\t3")
	got := Format(Persistent(b, a))
	if want := "files changed:\n- /x  2\n+ /x  3"; strings.Join(got, "\n") != want {
		t.Errorf("Persistent = %q; want %q", got, want)
	}
}
