// Package sentry runs a gVisor Sentry kernel inside the current process and
// starts guest processes in it.
//
// A Sandbox is one kernel: an EROFS image as the read-only lower layer of the
// root filesystem under an in-memory upper layer (so every write vanishes with
// the process), /proc, /sys, /dev, /dev/pts, /dev/mqueue, /tmp and /run, a
// loopback-only network stack (Config.ConfigureNetwork adds NICs), and the
// systrap platform by default. No host mounts, no namespaces, no cgroups and
// no capabilities are needed: the loader works when the process runs as an
// unprivileged user with NO_NEW_PRIVS set and user namespaces unavailable,
// including inside an unprivileged container with Docker's default seccomp
// profile.
//
// Typical use, in a process that exists to host one sandbox (rungv):
//
//	img, _ := os.Open("root.erofs") // open every host file before Start
//	sb, err := sentry.New(sentry.Config{Image: img, Hostname: "box"})
//	if err != nil { ... }
//	defer sb.Close()
//	init, err := sb.Start(sentry.ProcessSpec{Argv: []string{"/bin/sh"}, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
//	// or: init, err := sb.StartIdle() // serve Exec only; needs nothing from the image
//	p, err := sb.Exec(ctx, sentry.ProcessSpec{Argv: []string{"ls", "/"}, Stdout: &buf})
//	st, err := p.Wait() // st.ExitCode(): the code, or 128+signal
//	st, err = init.Wait()
//	err = sb.Shutdown(ctx) // SIGTERM to init, SIGKILL to all at ctx's deadline
//
// Volumes (Config.Volumes) are ext4 images in single host files, or
// copy-on-write clones of them (core/ext4lite), mounted where the guest
// wants them and served by the Sentry itself (package ext4fs): nothing is
// mounted on the host. New opens them; Close writes them back and closes
// them cleanly; a killed process leaves a journal the next mount replays.
// The guest's own overlay mounts (Docker's overlay2) may put their upper
// and work directories on a volume; see overlayType.
//
// Host lockdown: unless Config.DisableLockdown is set, New sets NO_NEW_PRIVS
// and drops every capability on the whole process before the platform
// starts, and Start installs core/lockdown's seccomp allowlist before the
// first guest instruction. After Start the process cannot open host files
// (openat is denied), create sockets or pipes, fork or exec, and a system
// call outside the list kills it with SIGSYS. Open everything first; pass
// host descriptors for later use (a control socket: Config.Lockdown).
//
// Restrictions that follow from gVisor's design:
//
//   - A process hosts at most one live Sandbox (New fails with ErrBusy);
//     memory accounting, the syscall table and the platform's stub
//     processes are process-wide. After Close the process may host another
//     one, on the same platform.
//   - The binary must be built with CGO_ENABLED=0: with cgo, systrap hangs
//     while creating its stub processes.
//   - The process must stay dumpable: systrap ptraces its own stubs, so
//     other processes of the same uid could ptrace it too unless Yama's
//     ptrace_scope is at least 1. A dedicated uid helps.
package sentry

//go:generate go run z.gfire.dev/gvx/core/internal/stategen
