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
	init, err := idleInitELF()
	if err != nil {
		return nil, err
	}
	exe, err := s.idleInitFile(init.elf)
	if err != nil {
		return nil, err
	}
	defer exe.DecRef(s.k.SupervisorContext())
	p, err := s.start(&ProcessSpec{Argv: []string{idleInitName}, noStdio: true}, exe)
	if err != nil {
		return nil, err
	}
	// The init installs these actions as its first instructions, but a
	// signal that came before it ran them would take the default action:
	// a SIGTERM right after start would end it with status 143 instead of
	// 0. Installing the same actions here, before the caller can send one,
	// closes that window.
	exit := linux.SigAction{Handler: init.exitHandler, Flags: linux.SA_RESTORER, Restorer: init.exitHandler}
	for sig, act := range map[linux.Signal]linux.SigAction{
		linux.SIGTERM: exit,
		linux.SIGINT:  exit,
		linux.SIGCHLD: {Handler: linux.SIG_IGN, Flags: linux.SA_RESTORER, Restorer: init.exitHandler},
	} {
		if _, err := p.tg.SetSigAction(sig, &act); err != nil {
			return nil, fmt.Errorf("sentry: setting the idle init's action for %v: %w", sig, err)
		}
	}
	return p, nil
}

// idleInitFile writes the idle init executable to a private tmpfs, one no
// guest mount namespace contains, and opens it for execution.
func (s *Sandbox) idleInitFile(elf []byte) (*vfs.FileDescription, error) {
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
