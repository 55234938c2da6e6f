package sentry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"z.gfire.dev/gvx/core/sentry/internal/busyboxroot"
)

func fileHash(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func TestIsolationHostProcessesInvisible(t *testing.T) {
	s := newSandbox(t, Config{})
	startIdle(t, s)
	r := execAndWait(t, s, sh(`for p in /proc/[0-9]*; do echo "${p#/proc/} $(cat $p/comm)"; done`))
	seen := map[int]string{}
	for _, l := range lines(r.stdout) {
		f := strings.Fields(l)
		pid, err := strconv.Atoi(f[0])
		if err != nil || len(f) != 2 {
			t.Fatalf("bad line %q in %q", l, r.stdout)
		}
		seen[pid] = f[1]
	}
	// init (sleep), the shell, and the cat of the moment: nothing else.
	allowed := map[string]bool{"sleep": true, "sh": true, "cat": true}
	if len(seen) > 3 || seen[1] != "sleep" {
		t.Fatalf("guest sees processes %v", seen)
	}
	for pid, comm := range seen {
		if !allowed[comm] || pid > 3 {
			t.Errorf("guest sees a process that is not its own: %d %q", pid, comm)
		}
	}
}

func TestIsolationHostFilesUnreachable(t *testing.T) {
	tokenBytes := make([]byte, 16)
	rand.Read(tokenBytes)
	token := hex.EncodeToString(tokenBytes)
	hostDir := t.TempDir()
	hostFile := filepath.Join(hostDir, "secret")
	if err := os.WriteFile(hostFile, []byte(token+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newSandbox(t, Config{})
	startIdle(t, s)
	// The token is split so the script's own command line does not match.
	script := fmt.Sprintf(`
t1=%s; t2=%s
test -e %s && echo "host file visible"
# Every regular file of the root filesystem, symlinks not followed.
find / /tmp /run -xdev -type f -exec grep -l "$t1$t2" {} + 2>/dev/null && echo "token found"
cat /etc/passwd
mkdir -p /mnt/x && mount -t proc proc /mnt/x && ls /mnt/x | grep -c '^[0-9]'
`, token[:16], token[16:], hostFile)
	r := execAndWait(t, s, sh(script))
	if strings.Contains(r.stdout, "visible") || strings.Contains(r.stdout, "token found") {
		t.Fatalf("guest reached host files: %q", r.stdout)
	}
	if !strings.HasPrefix(r.stdout, busyboxroot.Passwd) {
		t.Fatalf("guest /etc/passwd is not the image's: %q %q", r.stdout, r.stderr)
	}
	// Control: the same search finds the token once it is inside.
	if err := s.WriteFile(context.Background(), "/root/control", []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := execAndWait(t, s, sh(script)); !strings.Contains(r.stdout, "token found") {
		t.Fatalf("the search does not find a token inside the sandbox: %q %q", r.stdout, r.stderr)
	}
}

func TestIsolationWritesStayInside(t *testing.T) {
	before := fileHash(t, imagePath)
	dir := filepath.Dir(imagePath)
	entries, _ := os.ReadDir(dir)
	mountsBefore, _ := os.ReadFile("/proc/self/mountinfo")

	s := newSandbox(t, Config{})
	r := startAndWait(t, s, sh(`
echo new > /newfile && echo changed >> /etc/gvx-marker
rm -rf /bin/busybox /etc/passwd /home
mkdir -p /mnt/t && mount -t tmpfs none /mnt/t && echo x > /mnt/t/x
echo done`))
	// The shell still runs from memory; busybox is gone for new processes.
	if !strings.HasSuffix(r.stdout, "done\n") {
		t.Fatalf("%v %q %q", r.status, r.stdout, r.stderr)
	}
	s.Close()

	if after := fileHash(t, imagePath); after != before {
		t.Fatal("the image changed")
	}
	after, _ := os.ReadDir(dir)
	if len(after) != len(entries) {
		t.Fatalf("host directory of the image changed: %d entries before, %d after", len(entries), len(after))
	}
	if mountsAfter, _ := os.ReadFile("/proc/self/mountinfo"); string(mountsAfter) != string(mountsBefore) {
		t.Fatal("host mounts changed")
	}
	// A new sandbox from the same image sees it pristine.
	s2 := newSandbox(t, Config{})
	r = startAndWait(t, s2, sh(`cat /etc/gvx-marker; test -e /newfile || echo no-newfile; test -x /bin/busybox && echo busybox`))
	if r.stdout != busyboxroot.Marker+"no-newfile\nbusybox\n" {
		t.Fatalf("second sandbox: %q %q", r.stdout, r.stderr)
	}
}
