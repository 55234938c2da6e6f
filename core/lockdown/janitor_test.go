package lockdown

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// janitorSocketEnv names the socket a janitor helper removes.
const janitorSocketEnv = "GVX_LOCKDOWN_TEST_SOCKET"

// runJanitorHelper locks itself down as a janitor reading stdin (with
// stderr on stdout, the one stream it may write), reports "locked", keeps
// the Go runtime busy, waits for the end of stdin, then removes the socket
// and reports "removed"; mode janitor-forbidden then opens a file, which
// the filter forbids.
func runJanitorHelper(mode string) int {
	unix.Dup2(1, 2)
	unix.SetNonblock(0, false)
	if err := InstallJanitor(JanitorOptions{PipeFD: 0}); err != nil {
		os.Stderr.WriteString("lockdown: " + err.Error() + "\n")
		return 3
	}
	os.Stderr.WriteString("locked\n")
	// Threads, fresh heap, garbage collections and timers while blocked.
	done := make(chan byte)
	for i := range 8 {
		go func() {
			b := make([]byte, 8<<20)
			b[len(b)-1] = byte(i)
			runtime.GC()
			time.Sleep(time.Millisecond)
			done <- b[len(b)-1]
		}()
	}
	var buf [16]byte
	for {
		if n, err := unix.Read(0, buf[:]); n <= 0 && err != unix.EINTR {
			break
		}
	}
	for range 8 {
		<-done
	}
	path := os.Getenv(janitorSocketEnv)
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return 5
	}
	if err := unix.Unlinkat(unix.AT_FDCWD, path, 0); err != nil {
		return 6
	}
	os.Stderr.WriteString("removed\n")
	if mode == "janitor-forbidden" {
		// openat is not on the list: the process dies here.
		unix.Open(os.DevNull, unix.O_RDONLY, 0)
		os.Stderr.WriteString("survived\n")
	}
	return 0
}

func TestJanitorLockdown(t *testing.T) {
	for _, mode := range []string{"janitor", "janitor-forbidden"} {
		t.Run(mode, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "s.sock")
			l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			l.SetUnlinkOnClose(false)
			l.Close()
			t.Setenv(janitorSocketEnv, sock)
			h := startHelper(t, mode)
			st, err := ReadStatus(h.cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Locked() {
				t.Errorf("janitor helper status %+v, want locked (no_new_privs, seccomp, no capabilities)", st)
			}
			if os.Getuid() == 0 && st.CapBnd != 0 {
				t.Errorf("bounding set %#x, want empty", st.CapBnd)
			}
			out, ps := h.proceed(t)
			if !strings.HasPrefix(out, "removed\n") {
				t.Errorf("janitor helper: %v, output %q; want it to remove the socket", ps, out)
			}
			if _, err := os.Lstat(sock); !os.IsNotExist(err) {
				t.Errorf("socket still there: %v", err)
			}
			ws := ps.Sys().(syscall.WaitStatus)
			switch mode {
			case "janitor":
				if !ps.Success() {
					t.Errorf("janitor helper ended with %v, want success", ps)
				}
			case "janitor-forbidden":
				if !ws.Signaled() || ws.Signal() != syscall.SIGSYS || strings.Contains(out, "survived") {
					t.Errorf("janitor helper ended with %v, output %q; want death by SIGSYS at openat", ps, out)
				}
			}
		})
	}
}

func TestNeedsDACOverride(t *testing.T) {
	own := t.TempDir()
	if need, err := NeedsDACOverride(own); err != nil || need {
		t.Errorf("NeedsDACOverride(own directory) = %v, %v; want false", need, err)
	}
	if need, err := NeedsDACOverride(filepath.Join(own, "gone")); err != nil || need {
		t.Errorf("NeedsDACOverride(missing directory) = %v, %v; want false", need, err)
	}
	if os.Getuid() != 0 {
		t.Skip("the rest needs root, to own a directory as another user")
	}
	other := filepath.Join(own, "nobody")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(other, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if need, err := NeedsDACOverride(other); err != nil || !need {
		t.Errorf("NeedsDACOverride(another user's 0755 directory) = %v, %v; want true", need, err)
	}
	// The check lowered one thread's capabilities only for its duration.
	if has, err := hasEffectiveCap(unix.CAP_DAC_OVERRIDE); err != nil || !has {
		t.Errorf("CAP_DAC_OVERRIDE after the check: %v, %v", has, err)
	}
}
