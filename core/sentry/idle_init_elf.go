package sentry

import (
	"encoding/binary"
	"fmt"
	"runtime"
)

// idleInitELF returns a static x86-64 executable for the built-in idle
// init (StartIdle): it ignores SIGCHLD, so the kernel reaps orphans at
// once, exits with status 0 on SIGTERM or SIGINT, and otherwise sleeps in
// pause(2). 230 bytes, no libc, nothing from the image.
func idleInitELF() ([]byte, error) {
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("sentry: the built-in idle init exists for amd64 only, not %s", runtime.GOARCH)
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
	var a asm
	// rt_sigaction(sig, &act, NULL, 8) for SIGCHLD (ignore) and
	// SIGTERM and SIGINT (exit).
	for _, sc := range []struct {
		sig uint32
		act string
	}{{sigCHLD, "ignore"}, {sigTERM, "exit"}, {sigINT, "exit"}} {
		a.emit(0xb8).u32(sysRtSigaction)       // mov eax, 13
		a.emit(0xbf).u32(sc.sig)               // mov edi, sig
		a.emit(0x48, 0x8d, 0x35).rel32(sc.act) // lea rsi, [rip+act]
		a.emit(0x31, 0xd2)                     // xor edx, edx
		a.emit(0x41, 0xba).u32(8)              // mov r10d, 8
		a.emit(0x0f, 0x05)                     // syscall
	}
	a.label("loop")
	a.emit(0xb8).u32(sysPause) // mov eax, 34
	a.emit(0x0f, 0x05)         // syscall
	a.emit(0xeb).rel8("loop")  // jmp loop
	a.label("handler")
	a.emit(0xb8).u32(sysExitGroup) // mov eax, 231
	a.emit(0x31, 0xff)             // xor edi, edi
	a.emit(0x0f, 0x05)             // syscall
	// struct kernel_sigaction { handler, flags, restorer, mask }.
	a.label("ignore")
	a.u64(sigIGN).u64(saRestorer).abs64("handler", elfCodeAddr).u64(0)
	a.label("exit")
	a.abs64("handler", elfCodeAddr).u64(saRestorer).abs64("handler", elfCodeAddr).u64(0)
	code, err := a.link()
	if err != nil {
		return nil, err
	}
	return staticELF(code), nil
}

// The layout of staticELF's executables: one PT_LOAD segment mapped at
// elfBase holding the headers, then the code, which starts at elfCodeAddr.
const (
	elfBase     = 0x400000
	elfHdrSize  = 64
	elfPhdrSize = 56
	elfCodeAddr = elfBase + elfHdrSize + elfPhdrSize
)

// staticELF wraps x86-64 machine code, linked to run at elfCodeAddr, in a
// static ELF executable whose entry point is the code's first byte.
func staticELF(code []byte) []byte {
	const codeOff = elfHdrSize + elfPhdrSize
	b := make([]byte, codeOff, codeOff+len(code))
	le := binary.LittleEndian
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* little endian */, 1 /* version */})
	le.PutUint16(b[16:], 2)    // ET_EXEC
	le.PutUint16(b[18:], 0x3e) // EM_X86_64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], elfCodeAddr) // entry
	le.PutUint64(b[32:], elfHdrSize)  // program headers
	le.PutUint16(b[52:], elfHdrSize)
	le.PutUint16(b[54:], elfPhdrSize)
	le.PutUint16(b[56:], 1)
	ph := b[elfHdrSize:]
	size := uint64(codeOff + len(code))
	le.PutUint32(ph[0:], 1) // PT_LOAD
	le.PutUint32(ph[4:], 5) // PF_R|PF_X
	le.PutUint64(ph[16:], elfBase)
	le.PutUint64(ph[24:], elfBase)
	le.PutUint64(ph[32:], size)
	le.PutUint64(ph[40:], size)
	le.PutUint64(ph[48:], 0x1000)
	return append(b, code...)
}

// asm assembles machine code with forward and backward labels.
type asm struct {
	code   []byte
	labels map[string]int
	fixups []fixup
}

// fixup is a reference to a label, resolved by link.
type fixup struct {
	at    int    // offset of the field
	size  int    // 1, 4 or 8 bytes
	label string // target
	pcrel bool   // relative to the end of the field, else absolute
	base  uint64 // for absolute: the address of code[0]
}

func (a *asm) emit(b ...byte) *asm { a.code = append(a.code, b...); return a }

func (a *asm) u32(v uint32) *asm { a.code = binary.LittleEndian.AppendUint32(a.code, v); return a }

func (a *asm) u64(v uint64) *asm { a.code = binary.LittleEndian.AppendUint64(a.code, v); return a }

func (a *asm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.code)
}

func (a *asm) ref(label string, size int, pcrel bool, base uint64) *asm {
	a.fixups = append(a.fixups, fixup{at: len(a.code), size: size, label: label, pcrel: pcrel, base: base})
	a.code = append(a.code, make([]byte, size)...)
	return a
}

func (a *asm) rel8(label string) *asm  { return a.ref(label, 1, true, 0) }
func (a *asm) rel32(label string) *asm { return a.ref(label, 4, true, 0) }

func (a *asm) abs64(label string, base uint64) *asm { return a.ref(label, 8, false, base) }

// link resolves the label references.
func (a *asm) link() ([]byte, error) {
	for _, f := range a.fixups {
		target, ok := a.labels[f.label]
		if !ok {
			return nil, fmt.Errorf("sentry: idle init: undefined label %q", f.label)
		}
		switch {
		case !f.pcrel:
			binary.LittleEndian.PutUint64(a.code[f.at:], f.base+uint64(target))
		case f.size == 4:
			binary.LittleEndian.PutUint32(a.code[f.at:], uint32(int32(target-(f.at+4))))
		case f.size == 1:
			d := target - (f.at + 1)
			if d < -128 || d > 127 {
				return nil, fmt.Errorf("sentry: idle init: jump to %q out of range", f.label)
			}
			a.code[f.at] = byte(int8(d))
		}
	}
	return a.code, nil
}
