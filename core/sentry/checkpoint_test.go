package sentry

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/ext4lite"
)

// counterInit is an init that keeps state in its own memory (the shell
// variable i) and in the root filesystem's writable layer, and says each
// step on stdout.
const counterInit = `echo "$$-$RANDOM-$RANDOM" > /tmp/secret
i=0
while :; do
	i=$((i+1))
	echo $i > /tmp/i.new && mv /tmp/i.new /tmp/i
	echo "tick $i"
	sleep 0.02
done`

// readCounter returns the counter init's last step as the guest wrote it.
func readCounter(t *testing.T, s *Sandbox) int {
	t.Helper()
	b, err := s.ReadFile(t.Context(), "/tmp/i")
	if err != nil {
		t.Fatalf("reading /tmp/i: %v", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("/tmp/i holds %q: %v", b, err)
	}
	return n
}

// startCounter boots a sandbox whose init is counterInit writing to a
// host pipe, and waits for a few steps.
func startCounter(t *testing.T) (*Sandbox, *os.File) {
	t.Helper()
	s := newSandbox(t, Config{})
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { outR.Close() })
	defer outW.Close()
	if _, err := s.Start(ProcessSpec{Argv: []string{"/bin/sh", "-c", counterInit}, Stdout: outW, Stderr: outW}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	go drain(outR)
	waitFor(t, "the counter to reach 5", func() bool {
		b, err := s.ReadFile(t.Context(), "/tmp/i")
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && n >= 5
	})
	return s, outR
}

func drain(f *os.File) {
	buf := make([]byte, 4096)
	for {
		if _, err := f.Read(buf); err != nil {
			return
		}
	}
}

// TestCheckpointRestoreContinuesTheGuest saves a running sandbox, closes
// it, restores the snapshot as a new sandbox and checks that the guest
// goes on from where it was: the same shell, with its variable and its
// files, writing to the restored sandbox's stdout.
func TestCheckpointRestoreContinuesTheGuest(t *testing.T) {
	s, _ := startCounter(t)
	secret, err := s.ReadFile(t.Context(), "/tmp/secret")
	if err != nil {
		t.Fatal(err)
	}
	before := readCounter(t, s)
	snap := filepath.Join(t.TempDir(), "snapshot")
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(f, CheckpointOptions{Annotations: map[string]string{"hook": "state"}}); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// The checkpointed sandbox runs on.
	waitFor(t, "the checkpointed sandbox to run on", func() bool { return readCounter(t, s) > before+2 })
	s.Close()

	img, err := os.Open(imagePath)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	f, err = os.Open(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	r, err := Restore(Config{Image: img, DisableLockdown: true}, f, RestoreStdio{Stdout: outW, Stderr: outW})
	outW.Close()
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	defer r.Close()
	if got := r.RestoredAnnotations()["hook"]; got != "state" {
		t.Errorf("restored annotation %q, want %q", got, "state")
	}

	// The restored shell writes its next steps to the new stdout,
	// counting on from where it was saved, not from 1.
	lines := bufio.NewScanner(outR)
	if !lines.Scan() {
		t.Fatalf("no output from the restored init: %v", lines.Err())
	}
	first := lines.Text()
	n, err := strconv.Atoi(strings.TrimPrefix(first, "tick "))
	if err != nil || n < before {
		t.Fatalf("the restored init's first line is %q; want a tick of at least %d, the count before the checkpoint (a fresh init would start at 1)", first, before)
	}
	if got, err := r.ReadFile(t.Context(), "/tmp/secret"); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("/tmp/secret after restore = %q, %v; want %q", got, err, secret)
	}
	res := execAndWait(t, r, sh(`cat /tmp/secret; tr '\0' ' ' </proc/1/cmdline | head -c 15`))
	if res.status.Code != 0 || !strings.HasPrefix(res.stdout, string(secret)) {
		t.Fatalf("exec after restore: %+v; want the secret %q first", res, secret)
	}
	if got := strings.TrimSpace(strings.TrimPrefix(res.stdout, string(secret))); got != "/bin/sh -c echo" {
		t.Fatalf("PID 1 after restore runs %q, want the saved init", got)
	}
	if err := r.Init().Signal(15); err != nil {
		t.Fatal(err)
	}
	st, err := r.Wait()
	if err != nil || st.Signal != 15 {
		t.Fatalf("the restored init ended with %+v, %v; want SIGTERM", st, err)
	}
}

// TestCheckpointRefusesWhatASnapshotCannotHold checks the refusals name
// the reason: a running exec and relayed init output.
func TestCheckpointRefusesWhatASnapshotCannotHold(t *testing.T) {
	t.Run("running exec", func(t *testing.T) {
		s, _ := startCounter(t)
		p, err := s.Exec(t.Context(), ProcessSpec{Argv: []string{"/bin/sleep", "1000"}})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Checkpoint(&bytes.Buffer{}, CheckpointOptions{})
		if !errors.Is(err, fs.ErrInvalid) || !strings.Contains(err.Error(), "exec'd processes are still running") {
			t.Fatalf("Checkpoint with a running exec = %v; want a refusal naming it", err)
		}
		p.Kill()
		<-p.Done()
		if err := s.Checkpoint(&bytes.Buffer{}, CheckpointOptions{}); err != nil {
			t.Fatalf("Checkpoint after the exec ended: %v", err)
		}
	})
	t.Run("relayed output", func(t *testing.T) {
		s := newSandbox(t, Config{})
		var out syncBuffer
		if _, err := s.Start(ProcessSpec{Argv: []string{"/bin/sleep", "1000"}, Stdout: &out}); err != nil {
			t.Fatal(err)
		}
		err := s.Checkpoint(&bytes.Buffer{}, CheckpointOptions{})
		if !errors.Is(err, fs.ErrInvalid) || !strings.Contains(err.Error(), "standard streams") {
			t.Fatalf("Checkpoint of an init writing to a Go writer = %v; want a refusal naming its streams", err)
		}
	})
	t.Run("not started", func(t *testing.T) {
		s := newSandbox(t, Config{})
		if err := s.Checkpoint(&bytes.Buffer{}, CheckpointOptions{}); !errors.Is(err, ErrNotStarted) {
			t.Fatalf("Checkpoint before Start = %v; want ErrNotStarted", err)
		}
	})
}

// TestRestoreRefusesOtherInput checks Restore's errors for a stream that
// is no snapshot and for a snapshot restored on another image, before any
// kernel is made.
func TestRestoreRefusesOtherInput(t *testing.T) {
	img, err := os.Open(imagePath)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	_, err = Restore(Config{Image: img, DisableLockdown: true}, strings.NewReader("PK\x03\x04 a zip file"), RestoreStdio{})
	if !errors.Is(err, ErrNotSnapshot) {
		t.Fatalf("Restore of a non-snapshot = %v; want ErrNotSnapshot", err)
	}

	s, _ := startCounter(t)
	var snap bytes.Buffer
	if err := s.Checkpoint(&snap, CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Another image: the same bytes but one in its superblock.
	b, err := os.ReadFile(imagePath)
	if err != nil {
		t.Fatal(err)
	}
	b[1024+48] ^= 0xff
	other := filepath.Join(t.TempDir(), "other.erofs")
	if err := os.WriteFile(other, b, 0o644); err != nil {
		t.Fatal(err)
	}
	otherImg, err := os.Open(other)
	if err != nil {
		t.Fatal(err)
	}
	defer otherImg.Close()
	start := time.Now()
	_, err = Restore(Config{Image: otherImg, DisableLockdown: true}, bytes.NewReader(snap.Bytes()), RestoreStdio{})
	if !errors.Is(err, ErrSnapshotImage) {
		t.Fatalf("Restore on another image = %v (after %v); want ErrSnapshotImage", err, time.Since(start))
	}
	// A snapshot another build wrote is refused by name before decoding.
	r := bytes.NewReader(snap.Bytes())
	meta, err := readSnapshotHeader(r)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Build == "" || meta.Build != processBuildID {
		t.Fatalf("the snapshot names build %q; this process is %q", meta.Build, processBuildID)
	}
	meta.Build = "go:another/build/of/gvx"
	var otherBuild bytes.Buffer
	if err := writeSnapshotHeader(&otherBuild, meta); err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteTo(&otherBuild); err != nil {
		t.Fatal(err)
	}
	_, err = Restore(Config{Image: img, DisableLockdown: true}, bytes.NewReader(otherBuild.Bytes()), RestoreStdio{})
	if !errors.Is(err, ErrSnapshotBuild) || !strings.Contains(err.Error(), "build …gvx") {
		t.Fatalf("Restore of another build's snapshot = %v; want ErrSnapshotBuild naming it", err)
	}
	// A truncated snapshot fails with an error, not a crash, and leaves
	// the process free for the next sandbox.
	_, err = Restore(Config{Image: img, DisableLockdown: true}, bytes.NewReader(snap.Bytes()[:snap.Len()/2]), RestoreStdio{})
	if !errors.Is(err, ErrSnapshotDamaged) {
		t.Fatalf("Restore of a truncated snapshot = %v; want ErrSnapshotDamaged", err)
	}
	// One bit changed anywhere past the header: in gVisor's encoding of
	// the kernel (which may still decode) or in the guest's memory.
	hdr := bytes.NewReader(snap.Bytes())
	if _, err := readSnapshotHeader(hdr); err != nil {
		t.Fatal(err)
	}
	headerLength := snap.Len() - hdr.Len()
	for _, at := range []int{headerLength, headerLength + (snap.Len()-headerLength)/3, snap.Len() / 2, snap.Len() - 200, snap.Len() - 1} {
		damaged := bytes.Clone(snap.Bytes())
		damaged[at] ^= 0x01
		_, err = Restore(Config{Image: img, DisableLockdown: true}, bytes.NewReader(damaged), RestoreStdio{})
		if !errors.Is(err, ErrSnapshotDamaged) {
			t.Fatalf("Restore of a snapshot with bit 0 of byte %d of %d changed = %v; want ErrSnapshotDamaged", at, snap.Len(), err)
		}
	}
	restored, err := Restore(Config{Image: img, DisableLockdown: true}, bytes.NewReader(snap.Bytes()), RestoreStdio{})
	if err != nil {
		t.Fatalf("Restore after the failures: %v", err)
	}
	restored.Close()
}

// volumeCounterInit keeps a file on the volume open across steps (fd 3,
// appending) and another it rewrites, so a restore must bring back an open
// ext4 file and the inodes it caches.
const volumeCounterInit = `exec 3>>/data/log
mkdir -p /data/dir
i=0
while :; do
	i=$((i+1))
	echo "step $i" >&3
	echo $i > /data/dir/i.new && mv /data/dir/i.new /data/dir/i
	echo $i > /tmp/i.new && mv /tmp/i.new /tmp/i
	echo "tick $i"
	sleep 0.02
done`

// startVolumeCounter boots a sandbox with a new volume at /data and
// volumeCounterInit as its init.
func startVolumeCounter(t *testing.T) (s *Sandbox, dir, img string) {
	t.Helper()
	dir = volumeDir(t)
	img = newTestVolume(t, dir, 64<<20)
	s = newSandbox(t, Config{Volumes: []Volume{{Path: img, Target: "/data"}}})
	if _, err := s.Start(ProcessSpec{Argv: []string{"/bin/sh", "-c", volumeCounterInit}, Stdout: devNull(t), Stderr: devNull(t)}); err != nil {
		t.Fatal(err)
	}
	return s, dir, img
}

// TestCheckpointRestoreWithVolume stops a sandbox into a snapshot and its
// volume image, checks the image with e2fsck, restores the snapshot on a
// copy of the image and checks the guest goes on writing through the file
// it had open.
func TestCheckpointRestoreWithVolume(t *testing.T) {
	s, dir, img := startVolumeCounter(t)
	waitFor(t, "the counter to reach 5", func() bool {
		b, err := s.ReadFile(t.Context(), "/tmp/i")
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && n >= 5
	})
	var snap bytes.Buffer
	if err := s.Checkpoint(&snap, CheckpointOptions{}); err == nil || !strings.Contains(err.Error(), "Stop") {
		t.Fatalf("Checkpoint of a sandbox with a volume, not stopping: %v; want a refusal that asks for Stop", err)
	}
	if err := s.Checkpoint(&snap, CheckpointOptions{Stop: true}); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if _, err := s.Exec(t.Context(), ProcessSpec{Argv: []string{"/bin/true"}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Exec after a stopping checkpoint = %v; want ErrClosed", err)
	}
	checkImageClean(t, img)
	saved := strings.Count(debugfs(t, img, "cat /log"), "step ")

	// An episode restores on a copy; the saved image stays as it was.
	clone := filepath.Join(dir, "clone.ext4")
	copyFile(t, img, clone)
	imgFile, err := os.Open(imagePath)
	if err != nil {
		t.Fatal(err)
	}
	defer imgFile.Close()
	r, err := Restore(Config{Image: imgFile, DisableLockdown: true, Volumes: []Volume{{Path: clone, Target: "/data"}}}, bytes.NewReader(snap.Bytes()), RestoreStdio{})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	waitFor(t, "the restored counter to move on", func() bool {
		b, err := r.ReadFile(t.Context(), "/data/dir/i")
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && n >= saved+3
	})
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	checkImageClean(t, clone)
	// Every step went through the fd the shell opened before the
	// checkpoint: one line per step, none lost, none repeated.
	log := debugfs(t, clone, "cat /log")
	steps := strings.Split(strings.TrimSpace(log[strings.Index(log, "step 1"):]), "\n")
	for i, line := range steps {
		if line != "step "+strconv.Itoa(i+1) {
			t.Fatalf("line %d of /log on the restored volume is %q, want step %d\n%s", i+1, line, i+1, log)
		}
	}
	if len(steps) <= saved {
		t.Fatalf("the restored guest wrote no steps past the %d saved", saved)
	}
	if got := strings.Count(debugfs(t, img, "cat /log"), "step "); got != saved {
		t.Fatalf("the saved image changed: %d steps, was %d", got, saved)
	}
}

// TestRestoreChecksTheVolume restores a volume snapshot without its
// volume and on a fresh image: both fail with errors that say what to
// restore with.
func TestRestoreChecksTheVolume(t *testing.T) {
	s, dir, _ := startVolumeCounter(t)
	waitFor(t, "the counter to start", func() bool { _, err := s.Stat(t.Context(), "/data/dir/i"); return err == nil })
	var snap bytes.Buffer
	if err := s.Checkpoint(&snap, CheckpointOptions{Stop: true}); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	imgFile, err := os.Open(imagePath)
	if err != nil {
		t.Fatal(err)
	}
	defer imgFile.Close()
	_, err = Restore(Config{Image: imgFile, DisableLockdown: true}, bytes.NewReader(snap.Bytes()), RestoreStdio{})
	if err == nil || !strings.Contains(err.Error(), `volume at "/data"`) {
		t.Fatalf("Restore without the volume = %v; want an error naming /data", err)
	}
	fresh := filepath.Join(dir, "fresh.ext4")
	if err := ext4lite.Create(fresh, 64<<20); err != nil {
		t.Fatal(err)
	}
	_, err = Restore(Config{Image: imgFile, DisableLockdown: true, Volumes: []Volume{{Path: fresh, Target: "/data"}}}, bytes.NewReader(snap.Bytes()), RestoreStdio{})
	if err == nil || !strings.Contains(err.Error(), "image saved with the snapshot") {
		t.Fatalf("Restore on a fresh image = %v; want an error saying to use the saved image", err)
	}
	checkImageClean(t, fresh)
}

func devNull(t *testing.T) *os.File {
	t.Helper()
	f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointRefusesAnOpenDeletedFile: a volume file deleted while a
// guest process holds it open lives only in this process, so a snapshot
// cannot hold it; the refusal says so and the sandbox runs on.
func TestCheckpointRefusesAnOpenDeletedFile(t *testing.T) {
	dir := volumeDir(t)
	img := newTestVolume(t, dir, 64<<20)
	s := newSandbox(t, Config{Volumes: []Volume{{Path: img, Target: "/data"}}})
	spec := sh(`exec 4>/data/gone; rm /data/gone; touch /data/ready; exec sleep 1000`)
	spec.Stdout, spec.Stderr = devNull(t), devNull(t)
	if _, err := s.Start(spec); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the file to be deleted", func() bool { _, err := s.Stat(t.Context(), "/data/ready"); return err == nil })
	err := s.Checkpoint(&bytes.Buffer{}, CheckpointOptions{Stop: true})
	if !errors.Is(err, fs.ErrInvalid) || !strings.Contains(err.Error(), "deleted while a guest process still has it open") {
		t.Fatalf("Checkpoint with an open deleted file = %v; want a refusal that names it", err)
	}
	if res := execAndWait(t, s, sh("echo alive")); res.stdout != "alive\n" {
		t.Fatalf("the sandbox after the refusal: %+v", res)
	}
}
