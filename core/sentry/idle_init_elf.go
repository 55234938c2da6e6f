package sentry

import (
	"fmt"
	"runtime"

	"z.gfire.dev/gvx/core/internal/tinyelf"
)

// idleInit is the built-in idle init (StartIdle): a static x86-64
// executable that ignores SIGCHLD, so the kernel reaps orphans at once,
// exits with status 0 on SIGTERM or SIGINT, and otherwise sleeps in
// pause(2). No libc, nothing from the image.
type idleInit struct {
	elf []byte
	// exitHandler is the address of the handler that exits with status 0,
	// also its sa_restorer.
	exitHandler uint64
}

func idleInitELF() (idleInit, error) {
	if runtime.GOARCH != "amd64" {
		return idleInit{}, fmt.Errorf("sentry: the built-in idle init exists for amd64 only, not %s", runtime.GOARCH)
	}
	const (
		sysRtSigaction = 13
		sysPause       = 34
		sysExitGroup   = 231
		sigINT         = 2
		sigTERM        = 15
		sigCHLD        = 17
		sigIGN         = 1
		saRestorer     = 0x04000000
	)
	var a tinyelf.Asm
	// rt_sigaction(sig, &act, NULL, 8) for SIGCHLD (ignore) and
	// SIGTERM and SIGINT (exit).
	for _, sc := range []struct {
		sig uint32
		act string
	}{{sigCHLD, "ignore"}, {sigTERM, "exit"}, {sigINT, "exit"}} {
		a.Emit(0xb8).U32(sysRtSigaction)       // mov eax, 13
		a.Emit(0xbf).U32(sc.sig)               // mov edi, sig
		a.Emit(0x48, 0x8d, 0x35).Rel32(sc.act) // lea rsi, [rip+act]
		a.Emit(0x31, 0xd2)                     // xor edx, edx
		a.Emit(0x41, 0xba).U32(8)              // mov r10d, 8
		a.Emit(0x0f, 0x05)                     // syscall
	}
	a.Label("loop")
	a.Emit(0xb8).U32(sysPause) // mov eax, 34
	a.Emit(0x0f, 0x05)         // syscall
	a.Emit(0xeb).Rel8("loop")  // jmp loop
	a.Label("handler")
	a.Emit(0xb8).U32(sysExitGroup) // mov eax, 231
	a.Emit(0x31, 0xff)             // xor edi, edi
	a.Emit(0x0f, 0x05)             // syscall
	// struct kernel_sigaction { handler, flags, restorer, mask }.
	a.Label("ignore")
	a.U64(sigIGN).U64(saRestorer).Abs64("handler", tinyelf.CodeAddr).U64(0)
	a.Label("exit")
	a.Abs64("handler", tinyelf.CodeAddr).U64(saRestorer).Abs64("handler", tinyelf.CodeAddr).U64(0)
	code, err := a.Link()
	if err != nil {
		return idleInit{}, err
	}
	handler, err := a.Addr("handler", tinyelf.CodeAddr)
	if err != nil {
		return idleInit{}, err
	}
	return idleInit{elf: tinyelf.Executable(code), exitHandler: handler}, nil
}
