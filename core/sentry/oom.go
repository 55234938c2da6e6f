package sentry

import (
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
)

// minMemoryLimit is the smallest Config.MemoryLimit accepted: below it the
// kernel's own allocations (VDSO, page tables of the first process) would
// trip the limit.
const minMemoryLimit = 16 << 20

// OOM polling intervals: relaxed while usage is well below the limit, tight
// near it, so a fast allocator overshoots by at most a few milliseconds of
// allocation.
const (
	oomPollRelaxed = 20 * time.Millisecond
	oomPollTight   = 2 * time.Millisecond
	// oomVictimWait bounds the wait for a killed process to exit, and
	// oomSettle the wait after that for its memory to be returned to the
	// host (the memory file releases freed pages asynchronously). Without
	// the second wait the killer would pick a second, innocent victim.
	oomVictimWait = time.Second
	oomSettle     = 2 * time.Second
)

// oomKiller enforces the sandbox memory limit.
//
// gVisor leaves memory limits to host cgroups, which gvx does not use.
// Every byte the guest can make resident — anonymous memory, page cache of
// tmpfs and of the writable root layer, shared memory — lives in the
// kernel's memory file, so the file's allocated size is the sandbox's
// memory use. When it exceeds the limit, the killer sends SIGKILL to the
// guest process with the largest resident set, as Linux's OOM killer does
// inside a memory cgroup.
type oomKiller struct {
	k     *kernel.Kernel
	limit uint64
	kills atomic.Int64
	// victims holds the thread groups the killer signalled.
	victims sync.Map

	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}
}

func newOOMKiller(k *kernel.Kernel, limit uint64) *oomKiller {
	return &oomKiller{k: k, limit: limit, quit: make(chan struct{}), done: make(chan struct{})}
}

// run polls memory use until stop.
func (o *oomKiller) run() {
	defer close(o.done)
	interval := oomPollRelaxed
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-o.quit:
			return
		case <-t.C:
		}
		used, err := o.k.MemoryFile().TotalUsage()
		if err == nil && used > o.limit {
			o.killOne()
		}
		interval = oomPollRelaxed
		if err == nil && used > o.limit/4*3 {
			interval = oomPollTight
		}
		t.Reset(interval)
	}
}

// killOne kills the largest process and waits, boundedly, for it to exit.
func (o *oomKiller) killOne() {
	victim := o.largest()
	if victim == nil {
		return
	}
	o.victims.Store(victim, struct{}{})
	if err := o.k.SendExternalSignalThreadGroup(victim, &linux.SignalInfo{Signo: int32(linux.SIGKILL)}); err != nil {
		o.victims.Delete(victim)
		return
	}
	o.kills.Add(1)
	exited := make(chan struct{})
	go func() {
		victim.WaitExited()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(oomVictimWait):
		return
	case <-o.quit:
		return
	}
	deadline := time.Now().Add(oomSettle)
	for time.Now().Before(deadline) {
		if used, err := o.k.MemoryFile().TotalUsage(); err != nil || used <= o.limit {
			return
		}
		select {
		case <-o.quit:
			return
		case <-time.After(oomPollTight):
		}
	}
}

// largest returns the live thread group with the largest resident set.
func (o *oomKiller) largest() *kernel.ThreadGroup {
	var (
		best    *kernel.ThreadGroup
		bestRSS uint64
	)
	for _, tg := range o.k.TaskSet().Root.ThreadGroups() {
		leader := tg.Leader()
		if leader == nil {
			continue
		}
		var rss uint64
		alive := false
		leader.WithMuLocked(func(t *kernel.Task) {
			if mm := t.MemoryManager(); mm != nil {
				alive = true
				rss = mm.ResidentSetSize()
			}
		})
		if alive && (best == nil || rss > bestRSS) {
			best, bestRSS = tg, rss
		}
	}
	return best
}

// stop ends run and waits for it.
func (o *oomKiller) stop() {
	o.stopOnce.Do(func() { close(o.quit) })
	<-o.done
}

// killed reports whether the killer signalled tg.
func (o *oomKiller) killed(tg *kernel.ThreadGroup) bool {
	_, ok := o.victims.Load(tg)
	return ok
}
