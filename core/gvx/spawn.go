package gvx

import (
	"os/exec"
	"runtime"
	"sync"
)

// rungv children get SIGKILL when their parent *thread* exits
// (PR_SET_PDEATHSIG is per thread). A caller's thread may be short-lived —
// a Python thread calling through libgvx, a goroutine locked to its thread
// — so children are started from one thread of our own that lives as long
// as the process.

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawns    chan spawnRequest
)

func spawnerLoop() {
	// Locked and never unlocked or returned from: the thread never exits.
	runtime.LockOSThread()
	for req := range spawns {
		req.done <- req.cmd.Start()
	}
}

// startChild starts cmd from the spawner thread.
func startChild(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawns = make(chan spawnRequest)
		go spawnerLoop()
	})
	done := make(chan error, 1)
	spawns <- spawnRequest{cmd, done}
	return <-done
}
