package sentry

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestVolumeConcurrentWorkload runs guest processes that create, write,
// rename across directories, link, unlink, list and read the same
// volume at once, with enough files to make the dentry cache evict,
// then checks the image.
func TestVolumeConcurrentWorkload(t *testing.T) {
	img := newTestVolume(t, volumeDir(t), 1<<30)
	s := newSandbox(t, Config{Volumes: []Volume{{Path: img, Target: "/data"}}})
	startIdle(t, s)
	installFstool(t, s)
	mustRun(t, s, "mkdir -p /data/a /data/b /data/c")
	worker := `
set -e
cd /data
for j in $(seq 1 50); do
	echo "$W $j" > a/f$W-$j
	ln a/f$W-$j b/l$W-$j
	mv a/f$W-$j c/g$W-$j
	mkdir -p a/d$W/sub && echo x > a/d$W/sub/x && mv a/d$W b/d$W-$j && rm -rf b/d$W-$j
	[ "$(cat b/l$W-$j)" = "$W $j" ]
	rm b/l$W-$j
	[ $((j % 3)) = 0 ] && rm c/g$W-$j
done
echo done $W`
	scripts := map[string]string{
		"lister": "for i in $(seq 1 15); do ls -laR /data > /dev/null; find /data -type f -exec cat {} + > /dev/null 2>&1 || true; done; echo done lister",
		"bulk":   "/tmp/fstool bench /data/bulk 20000 > /dev/null && rmdir /data/bulk && echo done bulk",
		"mapper": "for i in $(seq 1 30); do /tmp/fstool mmap /data/m$((i % 3)) > /dev/null; done; echo done mapper",
	}
	for w := range 3 {
		scripts[fmt.Sprint("worker", w)] = "W=" + fmt.Sprint(w) + "\n" + worker
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for name, script := range scripts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out, errb strings.Builder
			p, err := s.Exec(ctx, ProcessSpec{Argv: []string{"/bin/sh", "-c", script}, Stdout: &out, Stderr: &errb})
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			st, err := p.Wait()
			mu.Lock()
			defer mu.Unlock()
			if err != nil || st.ExitCode() != 0 || !strings.Contains(out.String(), "done") {
				t.Errorf("%s: %v %v\n%s\n%s", name, st, err, out.String(), errb.String())
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	out := mustRun(t, s, "ls /data/a | wc -l; ls /data/b | wc -l; ls /data/c | wc -l")
	if out != "0\n0\n102\n" {
		t.Errorf("entries left in a, b, c: %q, want 0, 0, 102", out)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkImageClean(t, img)
}
