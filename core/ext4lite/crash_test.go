package ext4lite

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/ext4lite/blockdev"
)

const (
	crashEnvImage = "EXT4LITE_CRASH_IMAGE"
	crashEnvSeed  = "EXT4LITE_CRASH_SEED"
)

// createVolume makes a volume with non-default mkfs options.
func createVolume(t testing.TB, size int64, opts MkfsOptions) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vol.img")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	dev, err := blockdev.NewFile(f, false)
	if err != nil {
		t.Fatal(err)
	}
	opts.Zeroed = true
	if err := Mkfs(dev, opts); err != nil {
		t.Fatal(err)
	}
	dev.Close()
	return path
}

// syncedFile is a file the crash helper fsync'ed and never touched again.
type syncedFile struct {
	name string
	size int
	sum  string
}

// TestCrashChild is the writer the crash test kills; it only runs when
// re-executed by TestCrash.
func TestCrashChild(t *testing.T) {
	img := os.Getenv(crashEnvImage)
	if img == "" {
		t.Skip("helper process for TestCrash")
	}
	seed, _ := strconv.ParseUint(os.Getenv(crashEnvSeed), 10, 64)
	fs, err := OpenVolume(img, Options{CommitInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	synced, err := fs.Mkdir(RootIno, "synced", 0o755, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Sync(); err != nil {
		t.Fatal(err)
	}
	w := newWorkload(t, fs, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := 0; ; i++ {
		w.step()
		if rng.IntN(8) != 0 {
			continue
		}
		// A file written in pieces, fsync'ed, reported, never changed.
		name := fmt.Sprintf("f%d", i)
		ino, err := fs.Create(synced, name, 0o644, Owner{})
		if err != nil {
			t.Fatal(err)
		}
		data := w.content(1 + rng.IntN(300000))
		for off := 0; off < len(data); {
			n := min(len(data)-off, 1+rng.IntN(70000))
			if _, err := fs.WriteAt(ino, data[off:off+n], int64(off)); err != nil {
				t.Fatal(err)
			}
			off += n
		}
		if err := fs.Fsync(ino); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(os.Stdout, "SYNCED %s %d %s\n", name, len(data), hex.EncodeToString(sum[:]))
	}
}

// TestCrash kills a writer process with SIGKILL at random points, then
// checks that recovery leaves an e2fsck-clean filesystem holding every file
// the writer had fsync'ed.
func TestCrash(t *testing.T) {
	trials := 50
	if testing.Short() {
		trials = 10
	}
	if n, _ := strconv.Atoi(os.Getenv("EXT4LITE_SOAK")); n > 0 {
		trials += 50 * n
	}
	base := createVolume(t, 256<<20, MkfsOptions{JournalBlocks: 1024})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var replayed, synced, deltas int
	for trial := range trials {
		img := filepath.Join(t.TempDir(), "crash.img")
		// Every fourth writer works on a copy-on-write episode of the
		// base instead of a copy: the delta must be as crash-safe.
		delta := trial%4 == 3
		if delta {
			if _, err := blockdev.Clone(base, img); err != nil {
				t.Fatal(err)
			}
			deltas++
		} else {
			copyFile(t, base, img)
		}
		files := runCrashChild(t, exe, img, uint64(trial))
		synced += len(files)

		// e2fsck's own recovery must agree (every fifth trial, for time).
		if trial%5 == 0 {
			ref := img + ".e2fsck"
			if delta {
				if err := Flatten(img, ref); err != nil {
					t.Fatal(err)
				}
			} else {
				copyFile(t, img, ref)
			}
			exec.Command("e2fsck", "-fy", ref).Run()
			mustClean(t, ref)
		}

		fs := openRW(t, img)
		replayed += fs.Stats().Replayed
		dir, err := fs.Lookup(RootIno, "synced")
		if err != nil && len(files) > 0 {
			t.Fatalf("trial %d: synced directory lost: %v", trial, err)
		}
		for _, f := range files {
			ino, err := fs.Lookup(dir, f.name)
			if err != nil {
				t.Fatalf("trial %d: fsync'ed file %s lost: %v", trial, f.name, err)
			}
			data := make([]byte, f.size+1)
			n, err := fs.ReadAt(ino, data, 0)
			if err != io.EOF || n != f.size {
				t.Fatalf("trial %d: %s: read %d of %d bytes: %v", trial, f.name, n, f.size, err)
			}
			sum := sha256.Sum256(data[:n])
			if hex.EncodeToString(sum[:]) != f.sum {
				t.Fatalf("trial %d: fsync'ed file %s has the wrong content", trial, f.name)
			}
		}
		if err := fs.Close(); err != nil {
			t.Fatal(err)
		}
		mustClean(t, img)
	}
	t.Logf("%d trials (%d on deltas): %d fsync'ed files verified, %d journal blocks replayed", trials, deltas, synced, replayed)
}

// runCrashChild runs the writer on img and kills it at a random point,
// returning the files it reported as fsync'ed.
func runCrashChild(t *testing.T, exe, img string, seed uint64) []syncedFile {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 2))
	cmd := exec.Command(exe, "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnvImage+"="+img, crashEnvSeed+"="+strconv.FormatUint(seed, 10))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var files []syncedFile
	var other bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 4 && f[0] == "SYNCED" {
				size, _ := strconv.Atoi(f[2])
				mu.Lock()
				files = append(files, syncedFile{name: f[1], size: size, sum: f[3]})
				mu.Unlock()
				continue
			}
			other.WriteString(sc.Text() + "\n")
		}
	}()
	exited := make(chan error, 1)
	go func() {
		<-done
		exited <- cmd.Wait()
	}()
	delay := time.Duration(20+rng.IntN(250)) * time.Millisecond
	select {
	case err := <-exited:
		t.Fatalf("crash helper exited before the kill: %v\n%s%s", err, other.String(), stderr.String())
	case <-time.After(delay):
	}
	cmd.Process.Signal(syscall.SIGKILL)
	err = <-exited
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("crash helper was not killed (%v)\n%s%s", err, other.String(), stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	return files
}
