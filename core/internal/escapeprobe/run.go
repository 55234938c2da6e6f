package escapeprobe

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Result is what one run of Script showed.
type Result struct {
	// Tried counts the probes that began; Ended those that ended by
	// themselves; Hung lists the others (deadline, or no end at all).
	Tried, Ended int
	Hung         []string
	// Status is each ended probe's exit status.
	Status map[string]int
	// Done says the script ran to its end; a probe may end the sandbox
	// (reboot) instead.
	Done bool
	// Output is the guest's output; Stderr the runner's.
	Output, Stderr string
	// Panic is the first line of a Go panic or fatal error in Stderr.
	Panic string
}

// panicLine finds a Go runtime panic or fatal error.
var panicLine = regexp.MustCompile(`(?m)^(panic: |fatal error: |goroutine \d+ \[|SIGSEGV|unexpected signal).*$`)

// Run starts cmd, which runs Script(probes, …) (with sync when atGroup is
// not nil) and reads its output. After each group it calls atGroup and
// lets the script go on. silence bounds how long the script may print
// nothing (a probe's deadline and some); beyond it the script is killed
// and its running probe counted as hung. cmd's stdin and stdout must be
// unset; its stderr is captured.
func Run(cmd *exec.Cmd, silence time.Duration, atGroup func(group string)) (Result, error) {
	res := Result{Status: map[string]int{}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return res, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return res, err
	}
	lines := make(chan string)
	var readErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(lines)
		r := bufio.NewReader(stdout)
		for {
			l, err := r.ReadString('\n')
			if l != "" {
				lines <- strings.TrimSuffix(l, "\n")
			}
			if err != nil {
				if err != io.EOF {
					readErr = err
				}
				return
			}
		}
	}()
	var out strings.Builder
	running := ""
	timer := time.NewTimer(silence)
	defer timer.Stop()
	killed := false
loop:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				break loop
			}
			if !timer.Stop() {
				<-timer.C
			}
			timer.Reset(silence)
			out.WriteString(l + "\n")
			f := strings.Fields(l)
			switch {
			case len(f) == 2 && f[0] == "@@BEGIN":
				res.Tried++
				running = f[1]
			case len(f) == 3 && f[0] == "@@END":
				status, _ := strconv.Atoi(f[2])
				if status == TimedOutStatus {
					res.Hung = append(res.Hung, f[1]+" (killed at its deadline)")
				} else {
					res.Ended++
					res.Status[f[1]] = status
				}
				running = ""
			case len(f) == 2 && f[0] == "@@GROUP":
				if atGroup != nil {
					atGroup(f[1])
				}
				if _, err := io.WriteString(stdin, "\n"); err != nil {
					return res, fmt.Errorf("resuming the script after group %s: %w", f[1], err)
				}
			case l == "@@DONE":
				res.Done = true
				stdin.Close()
			}
		case <-timer.C:
			killed = true
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			if running != "" {
				res.Hung = append(res.Hung, running+fmt.Sprintf(" (nothing printed for %v)", silence))
				running = ""
			}
			for range lines {
			}
			break loop
		}
	}
	wg.Wait()
	stdin.Close()
	waitErr := cmd.Wait()
	if running != "" {
		// The run ended inside a probe: reboot may end the sandbox.
		res.Status[running] = -1
		res.Ended++
	}
	res.Output, res.Stderr = out.String(), stderr.String()
	res.Panic = panicLine.FindString(res.Stderr)
	if readErr != nil {
		return res, readErr
	}
	if killed {
		return res, fmt.Errorf("killed after %v of silence", silence)
	}
	if _, ok := waitErr.(*exec.ExitError); !ok && waitErr != nil {
		return res, waitErr
	}
	return res, nil
}
