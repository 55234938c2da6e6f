// Package sentry runs a gVisor Sentry kernel inside the current process and
// starts guest processes in it.
//
// A Sandbox is one kernel: an EROFS image as the read-only lower layer of the
// root filesystem under an in-memory upper layer (so every write vanishes with
// the process), /proc, /sys, /dev, /dev/pts, /tmp and /run, a loopback-only
// network stack, and the systrap platform by default. No host mounts, no
// namespaces, no cgroups and no capabilities are needed: the loader works
// when the process runs as an unprivileged user with NO_NEW_PRIVS set and
// user namespaces unavailable.
//
// Typical use, in a process that exists to host one sandbox (rungv):
//
//	img, _ := os.Open("root.erofs") // open every host file before New
//	sb, err := sentry.New(sentry.Config{Image: img, Hostname: "box"})
//	if err != nil { ... }
//	defer sb.Close()
//	init, err := sb.Start(sentry.ProcessSpec{Argv: []string{"/bin/sh"}, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
//	...
//	p, err := sb.Exec(ctx, sentry.ProcessSpec{Argv: []string{"ls", "/"}, Stdout: &buf})
//	st, err := p.Wait()
//	st, err = init.Wait()
//	sb.Shutdown(ctx)
//
// Restrictions that follow from gVisor's design:
//
//   - A process hosts at most one live Sandbox. Memory accounting, the
//     syscall table and the seccomp filter are process-wide; New fails with
//     ErrBusy while another Sandbox is live.
//   - The binary must be built with CGO_ENABLED=0: with cgo, systrap hangs
//     while creating its stub processes.
//   - The process must stay dumpable: systrap ptraces its own stubs.
//   - Unless Config.DisableLockdown is set, Start installs core/lockdown's
//     seccomp filter on the whole process. After that the process cannot open
//     host files (openat is denied), fork or exec; open everything first.
package sentry
