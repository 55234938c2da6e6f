package ext4lite

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestConcurrentUse runs writers in their own directories and readers over
// everything at once (run it with -race), then checks every writer's tree
// and the image.
func TestConcurrentUse(t *testing.T) {
	path := newVolume(t, 256<<20)
	fs := openRW(t, path)
	const writers = 4
	ops := 1500
	if testing.Short() {
		ops = 400
	}
	var works [writers]*workload
	var dirs [writers]Ino
	for i := range writers {
		d, err := fs.Mkdir(RootIno, fmt.Sprintf("w%d", i), 0o755, Owner{})
		if err != nil {
			t.Fatal(err)
		}
		dirs[i] = d
	}
	var running atomic.Int32
	running.Store(writers)
	var reads atomic.Int64
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer running.Add(-1)
			w := newWorkloadAt(goroutineTB{t}, fs, dirs[i], uint64(100+i))
			works[i] = w
			for range ops {
				w.step()
			}
		}()
	}
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			buf := make([]byte, 32<<10)
			for running.Load() > 0 {
				ino := Ino(rng.IntN(3000) + 1)
				st, err := fs.Stat(ino)
				if err != nil {
					continue // free or being deleted: fine
				}
				switch st.Mode & S_IFMT {
				case S_IFDIR:
					err = fs.ReadDir(ino, 0, func(Dirent) bool { return true })
				case S_IFREG:
					_, err = fs.ReadAt(ino, buf, int64(rng.IntN(int(st.Size)+1)))
					if err == io.EOF {
						err = nil
					}
				case S_IFLNK:
					_, err = fs.Readlink(ino)
				}
				if _, lerr := fs.ListXattr(ino); err == nil {
					err = lerr
				}
				// A racing delete may free the inode under us.
				if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ESTALE) {
					t.Errorf("read of inode %d: %v", ino, err)
				}
				reads.Add(1)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d reads alongside %d writers × %d ops", reads.Load(), writers, ops)
	for _, w := range works {
		w.verifyFS(fs)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	mustClean(t, path)
}

// goroutineTB lets test helpers run on other goroutines: a fatal failure
// ends only that goroutine.
type goroutineTB struct{ testing.TB }

func (g goroutineTB) Fatalf(format string, args ...any) {
	g.TB.Helper()
	g.TB.Errorf(format, args...)
	runtime.Goexit()
}

func (g goroutineTB) Fatal(args ...any) {
	g.TB.Helper()
	g.TB.Error(args...)
	runtime.Goexit()
}

// TestReadDirCallbackReenters: ReadDir's callback may call back into the
// filesystem while writers wait for the lock.
func TestReadDirCallbackReenters(t *testing.T) {
	path := newVolume(t, 64<<20)
	fs := openRW(t, path)
	dir, _ := fs.Mkdir(RootIno, "d", 0o755, Owner{})
	for i := range 1000 {
		fs.Create(dir, fmt.Sprintf("f%d", i), 0o644, Owner{})
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			fs.Create(RootIno, fmt.Sprintf("w%d", i), 0o644, Owner{})
		}
	}()
	for range 20 {
		count := 0
		if err := fs.ReadDir(dir, 0, func(d Dirent) bool {
			if _, err := fs.Stat(d.Ino); err != nil {
				t.Errorf("stat %s: %v", d.Name, err)
			}
			count++
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if count != 1002 {
			t.Fatalf("listed %d entries, want 1002", count)
		}
	}
	close(stop)
	<-done
}
