package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/ext4lite"
)

// checkClean runs the real e2fsck on img and fails unless it is clean:
// exit 0, no fix or warning, no pending journal.
func checkClean(t *testing.T, img string) {
	t.Helper()
	out, err := exec.Command("e2fsck", "-fn", img).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("Fix?")) || bytes.Contains(out, []byte("WARNING")) {
		t.Errorf("e2fsck -fn %s: %v\n%s", img, err, out)
	}
	if hdr, _ := exec.Command("dumpe2fs", "-h", img).CombinedOutput(); bytes.Contains(hdr, []byte("needs_recovery")) {
		t.Errorf("%s needs journal recovery", img)
	}
}

func debugfsCat(t *testing.T, img, path string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "cat "+path, img).Output()
	if err != nil {
		t.Fatalf("debugfs cat %s: %v", path, err)
	}
	return string(out)
}

func TestRunMountVolume(t *testing.T) {
	img := testImage(t)
	dir := t.TempDir()
	vol := filepath.Join(dir, "new.ext4")
	mount := "type=volume,src=" + vol + ",dst=/data"

	// A missing src is created: 16G, sparse.
	out, errOut, code := runCLI(t, "", "run", "-q", "--mount", mount, img, "sh", "-c",
		"echo written > /data/x; cp /bin/busybox /data/busybox; /data/busybox echo exec ok; df -k /data | tail -1")
	if code != 0 || !strings.Contains(out, "exec ok") {
		t.Fatalf("run --mount: exit %d\n%s\n%s", code, out, errOut)
	}
	st, err := os.Stat(vol)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != defaultVolumeSize {
		t.Errorf("created volume is %d bytes, want %d", st.Size(), defaultVolumeSize)
	}
	if used := st.Sys().(*syscall.Stat_t).Blocks * 512; used > 1<<30 {
		t.Errorf("created volume uses %d bytes on the host; it should be sparse", used)
	}
	checkClean(t, vol)
	if got := debugfsCat(t, vol, "/x"); got != "written\n" {
		t.Errorf("/x on the image: %q", got)
	}

	// The same volume again, then read-only.
	out, _, code = runCLI(t, "", "run", "-q", "--mount", mount, img, "cat", "/data/x")
	if code != 0 || out != "written\n" {
		t.Errorf("second run: exit %d %q", code, out)
	}
	// Read-only, on a small volume whose bytes can be compared.
	small := filepath.Join(dir, "small.ext4")
	if err := ext4lite.Create(small, 64<<20); err != nil {
		t.Fatal(err)
	}
	smallMount := "type=volume,src=" + small + ",dst=/data"
	if _, errOut, code := runCLI(t, "", "run", "-q", "--mount", smallMount, img, "sh", "-c", "echo written > /data/x"); code != 0 {
		t.Fatal(errOut)
	}
	before, _ := os.ReadFile(small)
	out, _, code = runCLI(t, "", "run", "-q", "--mount", smallMount+",readonly", img, "sh", "-c", "cat /data/x; touch /data/y || echo refused")
	if code != 0 || out != "written\nrefused\n" {
		t.Errorf("readonly: exit %d %q", code, out)
	}
	if after, _ := os.ReadFile(small); !bytes.Equal(before, after) {
		t.Error("a readonly mount changed the image")
	}

	for _, c := range []struct{ mount, want string }{
		{"type=bind,src=/tmp,dst=/data", "type=bind is not supported"},
		{"src=" + vol, "dst"},
		{"dst=/data", "src is missing"},
		{"src=" + vol + ",dst=data", "absolute"},
		{"src=" + vol + ",dst=/data,colour=blue", "unknown key"},
		{"src=/etc/passwd,dst=/data", "rungv volume check"},
		{"src=" + filepath.Join(dir, "absent.ext4") + ",dst=/data,readonly", "rungv volume create"},
	} {
		_, errOut, code := runCLI(t, "", "run", "-q", "--mount", c.mount, img, "true")
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("--mount %s: exit %d, %q; want an error mentioning %q", c.mount, code, errOut, c.want)
		}
	}
}

// TestRunVolumeKill9 kills rungv while the guest writes to a volume: the
// journal must replay to a clean filesystem (with ext4lite and with
// e2fsck) that keeps what was synced.
func TestRunVolumeKill9(t *testing.T) {
	img := testImage(t)
	dir := t.TempDir()
	vol := filepath.Join(dir, "v.ext4")
	if err := ext4lite.Create(vol, 1<<30); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(rungvBinary, "--cache", sharedCache(t), "run", "-q", "--mount", "type=volume,src="+vol+",dst=/data", img, "sh", "-c", `
		echo synced-data > /data/marker; mkdir /data/d; sync; echo synced
		i=0; while :; do echo $i > /data/d/f$((i % 400)); mkdir -p /data/d/s$((i % 40)); rm -rf /data/d/s$(((i + 20) % 40)); [ $((i % 64)) = 0 ] && sync; i=$((i + 1)); done`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "synced\n" {
		cmd.Process.Kill()
		t.Fatalf("no synced line: %q", line)
	}
	// The guest commits every 64 rounds (sync), so the kill lands
	// anywhere in or between commits.
	time.Sleep(700 * time.Millisecond)
	cmd.Process.Kill()
	cmd.Wait()

	withExt4lite := filepath.Join(dir, "replayed-by-ext4lite.ext4")
	withE2fsck := filepath.Join(dir, "replayed-by-e2fsck.ext4")
	for _, c := range []string{withExt4lite, withE2fsck} {
		if out, err := exec.Command("cp", "--sparse=always", vol, c).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
	}
	fs, err := ext4lite.OpenVolume(withExt4lite, ext4lite.Options{})
	if err != nil {
		t.Fatalf("ext4lite cannot open the killed volume: %v", err)
	}
	t.Logf("ext4lite replay: %+v", fs.Stats())
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	checkClean(t, withExt4lite)
	out, err := exec.Command("e2fsck", "-fy", withE2fsck).CombinedOutput()
	if code := exitCode(err); code > 1 {
		t.Errorf("e2fsck -fy (journal replay) exit %d:\n%s", code, out)
	}
	checkClean(t, withE2fsck)
	for _, c := range []string{withExt4lite, withE2fsck} {
		if got := debugfsCat(t, c, "/marker"); got != "synced-data\n" {
			t.Errorf("%s: the synced marker reads %q", filepath.Base(c), got)
		}
	}
	// rungv replays it too, and `volume check` then says clean.
	if _, errOut, code := runCLI(t, "", "run", "-q", "--mount", "type=volume,src="+vol+",dst=/data", img, "cat", "/data/marker"); code != 0 {
		t.Errorf("mounting the killed volume: exit %d %s", code, errOut)
	}
	if out, _, code := runCLI(t, "", "volume", "check", vol); code != 0 || !strings.Contains(out, "clean") {
		t.Errorf("volume check after replay: exit %d %q", code, out)
	}
}

// TestRunVolumeGracefulStop stops rungv with SIGTERM while the guest
// writes: the volume is closed cleanly.
func TestRunVolumeGracefulStop(t *testing.T) {
	img := testImage(t)
	vol := filepath.Join(t.TempDir(), "v.ext4")
	cmd := exec.Command(rungvBinary, "--cache", sharedCache(t), "run", "-q", "--stop-timeout", "300ms", "--mount", "type=volume,src="+vol+",dst=/data", img, "sh", "-c",
		`trap '' TERM; echo ready; i=0; while :; do echo $i >> /data/log; i=$((i + 1)); done`)
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(stdout).ReadString('\n')
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if stderr.Len() > 0 {
		t.Errorf("rungv reported: %s", stderr.String())
	}
	checkClean(t, vol)
}

func TestVolumeCommands(t *testing.T) {
	dir := t.TempDir()
	golden := filepath.Join(dir, "golden.ext4")
	ep := filepath.Join(dir, "ep.ext4")
	flat := filepath.Join(dir, "flat.ext4")
	cli := func(args ...string) (string, string, int) {
		return runCLI(t, "", append([]string{"volume"}, args...)...)
	}

	if _, errOut, code := cli("create", golden, "--size", "512M"); code != 0 {
		t.Fatalf("create: %d %s", code, errOut)
	}
	if st, _ := os.Stat(golden); st == nil || st.Size() != 512<<20 {
		t.Errorf("create --size 512M made %v", st)
	}
	if out, _, code := cli("check", golden); code != 0 || !strings.Contains(out, "clean") {
		t.Errorf("check: %d %q", code, out)
	}
	img := testImage(t)
	if _, errOut, code := runCLI(t, "", "run", "-q", "--mount", "src="+golden+",dst=/g", img, "sh", "-c", "echo gold > /g/f"); code != 0 {
		t.Fatalf("filling the golden: %s", errOut)
	}
	if _, errOut, code := cli("clone", golden, ep); code != 0 || !strings.Contains(errOut, "cloned") {
		t.Fatalf("clone: %d %s", code, errOut)
	}
	if out, _, code := runCLI(t, "", "run", "-q", "--mount", "src="+ep+",dst=/g", img, "sh", "-c", "cat /g/f; echo episode > /g/f"); code != 0 || out != "gold\n" {
		t.Errorf("episode run: %d %q", code, out)
	}
	if out, _, code := cli("check", ep); code != 0 || !strings.Contains(out, "clean") {
		t.Errorf("check of the clone: %d %q", code, out)
	}
	if _, errOut, code := cli("flatten", ep, flat); code != 0 {
		t.Fatalf("flatten: %d %s", code, errOut)
	}
	checkClean(t, flat)
	if got := debugfsCat(t, flat, "/f"); got != "episode\n" {
		t.Errorf("flattened /f: %q", got)
	}
	if got := debugfsCat(t, golden, "/f"); got != "gold\n" {
		t.Errorf("golden /f: %q", got)
	}

	// Bad input says what is wrong.
	notExt4 := filepath.Join(dir, "not.ext4")
	os.WriteFile(notExt4, bytes.Repeat([]byte("x"), 1<<20), 0o644)
	other := filepath.Join(dir, "other.ext4")
	if err := ext4lite.Create(other, 512<<20); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"check", notExt4}, "not a usable ext4 volume"},
		{[]string{"clone", notExt4, filepath.Join(dir, "x.ext4")}, "not a usable ext4 volume"},
		{[]string{"clone", ep, filepath.Join(dir, "x.ext4")}, "is itself a clone"},
		{[]string{"clone", golden, ep}, "exists"},
		{[]string{"create", golden}, "exists"},
		{[]string{"create", filepath.Join(dir, "tiny.ext4"), "--size", "1M"}, "at least 16M"},
		{[]string{"flatten", ep, filepath.Join(dir, "x.ext4"), "--golden", other}, "does not belong to its golden"},
		{[]string{"flatten", golden, filepath.Join(dir, "x.ext4"), "--golden", other}, "not a delta"},
	} {
		_, errOut, code := cli(c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("volume %s: exit %d %q, want an error mentioning %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
	// A golden written after cloning no longer matches its deltas.
	if _, errOut, code := runCLI(t, "", "run", "-q", "--mount", "src="+golden+",dst=/g", img, "sh", "-c", "echo changed > /g/f"); code != 0 {
		t.Fatal(errOut)
	}
	if _, errOut, code := cli("flatten", ep, filepath.Join(dir, "y.ext4")); code == 0 || !strings.Contains(errOut, "does not belong to its golden") {
		t.Errorf("flatten over a changed golden: exit %d %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "", "run", "-q", "--mount", "src="+ep+",dst=/g", img, "true"); code == 0 || !strings.Contains(errOut, "golden") {
		t.Errorf("running a clone of a changed golden: exit %d %q", code, errOut)
	}
}

// TestRunSaysVolumeCreated: a volume --mount creates is named on stderr
// with its size and how to choose another; -q keeps quiet.
func TestRunSaysVolumeCreated(t *testing.T) {
	img := testImage(t)
	vol := filepath.Join(t.TempDir(), "golden.ext4")
	_, errOut, code := runCLI(t, "", "run", "--mount", "type=volume,src="+vol+",dst=/data", img, "true")
	if want := "rungv: created the volume " + vol + ", 16 GiB, sparse (`rungv volume create " + vol + " --size N` first for another size)\n"; code != 0 || !strings.Contains(errOut, want) {
		t.Errorf("run --mount with a new volume: exit %d, stderr %q; want %q", code, errOut, want)
	}
}
