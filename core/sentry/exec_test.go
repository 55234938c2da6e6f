package sentry

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/tinyelf"
)

func TestExecParallel(t *testing.T) {
	const n = 100
	s := newSandbox(t, Config{})
	startIdle(t, s)

	type outcome struct {
		i       int
		status  ExitStatus
		out     string
		err     error
		latency time.Duration
	}
	results := make(chan outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			start := time.Now()
			p, err := s.Exec(context.Background(), ProcessSpec{
				Argv:   []string{"/bin/sh", "-c", `echo "exec $N"; cat /etc/gvx-marker; exit $((N % 7))`},
				Env:    []string{fmt.Sprintf("N=%d", i)},
				Stdout: &out,
			})
			if err != nil {
				results <- outcome{i: i, err: err}
				return
			}
			st, err := p.Wait()
			results <- outcome{i: i, status: st, out: out.String(), err: err, latency: time.Since(start)}
		}()
	}
	wg.Wait()
	close(results)
	var lat []time.Duration
	for r := range results {
		if r.err != nil {
			t.Errorf("exec %d: %v", r.i, r.err)
			continue
		}
		want := fmt.Sprintf("exec %d\ngvx test image\n", r.i)
		if r.out != want || r.status.ExitCode() != r.i%7 {
			t.Errorf("exec %d: %v %q, want exit %d %q", r.i, r.status, r.out, r.i%7, want)
		}
		lat = append(lat, r.latency)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		t.Logf("%d parallel execs: p50 %v, max %v (start to exit, all concurrent)", len(lat), lat[len(lat)/2], lat[len(lat)-1])
	}
}

// TestLatency reports boot and exec latency (also run by `go test -v`).
func TestLatency(t *testing.T) {
	start := time.Now()
	s := newSandbox(t, Config{})
	created := time.Since(start)
	var out syncBuffer
	p, err := s.Start(ProcessSpec{Argv: []string{"/bin/sh", "-c", "echo up; exec sleep 1000000"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Since(start)
	for out.String() == "" && time.Since(start) < 10*time.Second {
		time.Sleep(100 * time.Microsecond)
	}
	firstOutput := time.Since(start)
	_ = p

	const runs = 50
	lat := make([]time.Duration, 0, runs)
	for range runs {
		t0 := time.Now()
		r := execAndWait(t, s, ProcessSpec{Argv: []string{"true"}})
		if r.status.ExitCode() != 0 {
			t.Fatalf("true: %v", r.status)
		}
		lat = append(lat, time.Since(t0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("New %v, Start returned %v, first guest output %v after New began", created, started, firstOutput)
	t.Logf("exec `true` round trip over %d runs: p50 %v, p99 %v", runs, lat[runs/2], lat[runs*99/100])
}

func BenchmarkBootToFirstExit(b *testing.B) {
	for b.Loop() {
		s := newSandbox(b, Config{})
		p, err := s.Start(ProcessSpec{Argv: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		p.Wait()
		s.Close()
	}
}

// syscallSitesELF returns a static executable that makes one getppid(2)
// call on each of pages pages of its text, then exits with status 0.
// Under systrap each first call from a site traps, and the Sentry patches
// the site, which copies the page; so the executable measures what a
// patched page costs an exec apart from everything a libc does.
func syscallSitesELF(pages int) []byte {
	const (
		sysGetppid   = 110
		sysExitGroup = 231
		pageSize     = 4096
	)
	var a tinyelf.Asm
	for i := range pages {
		a.Emit(0xb8).U32(sysGetppid) // mov eax, 110
		a.Emit(0x0f, 0x05)           // syscall
		next := fmt.Sprintf("site%d", i+1)
		a.Emit(0xe9).Rel32(next) // jmp next
		for (tinyelf.CodeAddr+a.Len())%pageSize != 0 {
			a.Emit(0xcc) // int3
		}
		a.Label(next)
	}
	a.Emit(0x31, 0xff)             // xor edi, edi
	a.Emit(0xb8).U32(sysExitGroup) // mov eax, 231
	a.Emit(0x0f, 0x05)             // syscall
	code, err := a.Link()
	if err != nil {
		panic(err)
	}
	return tinyelf.Executable(code)
}

// BenchmarkExecFloor separates what an exec costs in gVisor from what the
// executed binary costs: an executable whose only system call is
// exit_group, the same after 1 and 7 text pages with a patched system call
// site each (busybox `true` patches 7), and busybox `true` itself.
func BenchmarkExecFloor(b *testing.B) {
	s := newSandbox(b, Config{Platform: Platform(os.Getenv("GVX_BENCH_PLATFORM"))})
	startIdle(b, s)
	for _, pages := range []int{0, 1, 7} {
		name := fmt.Sprintf("/tmp/sites%d", pages)
		if err := s.WriteFile(context.Background(), name, syscallSitesELF(pages), 0o755); err != nil {
			b.Fatal(err)
		}
		label := "exit-only"
		if pages > 0 {
			label = fmt.Sprintf("exit-after-%d-patched-pages", pages)
		}
		b.Run(label, func(b *testing.B) { benchmarkExec(b, s, name) })
	}
	b.Run("busybox-true", func(b *testing.B) { benchmarkExec(b, s, "true") })
}

func benchmarkExec(b *testing.B, s *Sandbox, argv0 string) {
	for b.Loop() {
		p, err := s.Exec(context.Background(), ProcessSpec{Argv: []string{argv0}})
		if err != nil {
			b.Fatal(err)
		}
		if status, err := p.Wait(); err != nil || status.ExitCode() != 0 {
			b.Fatalf("%s: %v, %v", argv0, status, err)
		}
	}
}

// TestExecUmask: a process's ProcessSpec.Umask is its file mode creation
// mask, which the files it creates show; without one it is 022.
func TestExecUmask(t *testing.T) {
	s := newSandbox(t, Config{})
	startIdle(t, s)
	private := uint(0o077)
	for _, c := range []struct {
		name  string
		umask *uint
		want  string
	}{
		{"unset", nil, "0022 644 755\n"},
		{"0o077", &private, "0077 600 700\n"},
	} {
		var out bytes.Buffer
		p, err := s.Exec(context.Background(), ProcessSpec{
			Argv:   []string{"/bin/sh", "-c", `d=$(mktemp -d) && touch $d/f && mkdir $d/d && echo $(umask) $(stat -c %a $d/f $d/d)`},
			Umask:  c.umask,
			Stdout: &out,
			Stderr: &out,
		})
		if err != nil {
			t.Fatal(err)
		}
		if st, err := p.Wait(); err != nil || st.ExitCode() != 0 || out.String() != c.want {
			t.Errorf("umask %s: %v %v %q; want %q", c.name, st, err, out.String(), c.want)
		}
	}
	wide := uint(0o1000)
	if _, err := s.Exec(context.Background(), ProcessSpec{Argv: []string{"true"}, Umask: &wide}); err == nil || !strings.Contains(err.Error(), "umask") {
		t.Errorf("umask 0o1000: %v; want an error naming the umask", err)
	}
}

// TestExecStderrToStdout: with ProcessSpec.StderrToStdout the guest's
// descriptor 2 is descriptor 1's pipe, so what the command writes to both
// arrives on Stdout in the order written and nothing on Stderr.
func TestExecStderrToStdout(t *testing.T) {
	s := newSandbox(t, Config{})
	startIdle(t, s)
	var out, errb bytes.Buffer
	p, err := s.Exec(context.Background(), ProcessSpec{
		Argv:           []string{"/bin/sh", "-c", "echo a; echo b >&2; echo c"},
		Stdout:         &out,
		Stderr:         &errb,
		StderrToStdout: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(); err != nil || st.ExitCode() != 0 || out.String() != "a\nb\nc\n" || errb.Len() != 0 {
		t.Errorf("stderr to stdout: %v %v stdout %q stderr %q; want stdout \"a\\nb\\nc\\n\" and no stderr", st, err, out.String(), errb.String())
	}
}
