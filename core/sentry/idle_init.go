package sentry

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/tmpfs"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
	"gvisor.dev/gvisor/pkg/usermem"
)

// idleInitName is the built-in idle init's command name in the guest.
const idleInitName = "gvx-init"

// StartIdle starts the built-in idle init in place of a program from the
// image, for sandboxes that only serve Exec: it needs nothing from the
// image (no shell), reaps orphaned processes, and exits with status 0 on
// SIGTERM or SIGINT, so Shutdown is graceful. Otherwise it is like Start.
func (s *Sandbox) StartIdle() (*Process, error) {
	exe, err := s.idleInitFile()
	if err != nil {
		return nil, err
	}
	defer exe.DecRef(s.k.SupervisorContext())
	return s.start(&ProcessSpec{Argv: []string{idleInitName}, noStdio: true}, exe)
}

// idleInitFile writes the idle init executable to a private tmpfs, one no
// guest mount namespace contains, and opens it for execution.
func (s *Sandbox) idleInitFile() (*vfs.FileDescription, error) {
	elf, err := idleInitELF()
	if err != nil {
		return nil, err
	}
	ctx := s.k.SupervisorContext()
	creds := auth.NewRootCredentials(s.k.RootUserNamespace())
	vfsObj := s.k.VFS()
	mnt, err := vfsObj.MountDisconnected(ctx, creds, idleInitName, tmpfs.Name, &vfs.MountOptions{
		GetFilesystemOptions: vfs.GetFilesystemOptions{InternalMount: true},
	})
	if err != nil {
		return nil, fmt.Errorf("sentry: creating the idle init's filesystem: %w", err)
	}
	defer mnt.DecRef(ctx)
	root := vfs.MakeVirtualDentry(mnt, mnt.Root())
	pop := pathAt(root, idleInitName, false)
	w, err := vfsObj.OpenAt(ctx, creds, pop, &vfs.OpenOptions{Flags: linux.O_WRONLY | linux.O_CREAT | linux.O_EXCL, Mode: 0o555})
	if err != nil {
		return nil, fmt.Errorf("sentry: creating the idle init: %w", err)
	}
	_, err = w.Write(ctx, usermem.BytesIOSequence(elf), vfs.WriteOptions{})
	w.DecRef(ctx)
	if err != nil {
		return nil, fmt.Errorf("sentry: writing the idle init: %w", err)
	}
	exe, err := vfsObj.OpenAt(ctx, creds, pop, &vfs.OpenOptions{Flags: linux.O_RDONLY, FileExec: true})
	if err != nil {
		return nil, fmt.Errorf("sentry: opening the idle init: %w", err)
	}
	return exe, nil
}
