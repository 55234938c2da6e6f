package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// fifoOpenUnderSignal makes a FIFO at path and opens it for writing with no
// reader, with the raw system call (no EINTR retry, as runc opens its exec
// FIFO). While that open waits, a signal whose handler has SA_RESTART (Go
// installs its handlers so) interrupts it; then the read side is opened. On
// Linux the interrupted open restarts and succeeds; it prints "restarted".
func fifoOpenUnderSignal(path string) error {
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return fmt.Errorf("mkfifo %s: %w", path, err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGUSR1)
	defer signal.Stop(sigs)

	type opened struct {
		fd  int
		err error
	}
	tids := make(chan int, 1)
	done := make(chan opened, 1)
	go func() {
		// The thread that blocks in open is the one the signal goes to.
		runtime.LockOSThread()
		tids <- unix.Gettid()
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		done <- opened{fd, err}
	}()
	tid := <-tids

	deadline := time.Now().Add(30 * time.Second)
	for {
		asleep, err := threadSleeps(tid)
		if err != nil {
			return err
		}
		if asleep {
			break
		}
		select {
		case r := <-done:
			return fmt.Errorf("open for writing returned before a reader came: fd %d, %v", r.fd, r.err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the writer's thread %d never slept in open", tid)
		}
		runtime.Gosched()
	}
	if err := unix.Tgkill(unix.Getpid(), tid, unix.SIGUSR1); err != nil {
		return fmt.Errorf("tgkill: %w", err)
	}
	select {
	case <-sigs:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("SIGUSR1 was not delivered")
	}
	// A non-blocking read open succeeds without a writer, and lets a
	// waiting writer through.
	rfd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the read side: %w", err)
	}
	defer unix.Close(rfd)
	select {
	case r := <-done:
		if r.err != nil {
			return fmt.Errorf("open for writing, interrupted by a SA_RESTART signal, failed: %w", r.err)
		}
		unix.Close(r.fd)
		fmt.Println("restarted")
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("open for writing did not return after the reader came")
	}
}

// threadSleeps reports whether thread tid of this process is in state S.
func threadSleeps(tid int) (bool, error) {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return false, err
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false, fmt.Errorf("unexpected /proc stat line %q", s)
	}
	return s[i+2] == 'S', nil
}
