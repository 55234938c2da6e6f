package sentry

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"
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

func BenchmarkExecTrue(b *testing.B) {
	s := newSandbox(b, Config{})
	startIdle(b, s)
	for b.Loop() {
		p, err := s.Exec(context.Background(), ProcessSpec{Argv: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		p.Wait()
	}
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
