// Package tinyelf writes small static x86-64 Linux executables from
// machine code: the Sentry's built-in idle init, and programs that measure
// one thing at a time in tests and benchmarks, with no libc and nothing
// from an image.
package tinyelf

import (
	"encoding/binary"
	"fmt"
)

// The layout of Executable's files: one PT_LOAD segment mapped at Base
// holding the headers, then the code, which starts at CodeAddr.
const (
	Base     = 0x400000
	hdrSize  = 64
	phdrSize = 56
	CodeAddr = Base + hdrSize + phdrSize
)

// Executable wraps x86-64 machine code, linked to run at CodeAddr, in a
// static ELF executable whose entry point is the code's first byte.
func Executable(code []byte) []byte {
	const codeOff = hdrSize + phdrSize
	b := make([]byte, codeOff, codeOff+len(code))
	le := binary.LittleEndian
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* little endian */, 1 /* version */})
	le.PutUint16(b[16:], 2)    // ET_EXEC
	le.PutUint16(b[18:], 0x3e) // EM_X86_64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], CodeAddr) // entry
	le.PutUint64(b[32:], hdrSize)  // program headers
	le.PutUint16(b[52:], hdrSize)
	le.PutUint16(b[54:], phdrSize)
	le.PutUint16(b[56:], 1)
	ph := b[hdrSize:]
	size := uint64(codeOff + len(code))
	le.PutUint32(ph[0:], 1) // PT_LOAD
	le.PutUint32(ph[4:], 5) // PF_R|PF_X
	le.PutUint64(ph[16:], Base)
	le.PutUint64(ph[24:], Base)
	le.PutUint64(ph[32:], size)
	le.PutUint64(ph[40:], size)
	le.PutUint64(ph[48:], 0x1000)
	return append(b, code...)
}

// Asm assembles machine code with forward and backward labels. The
// caller emits the instructions' bytes; Asm resolves the references.
type Asm struct {
	code   []byte
	labels map[string]int
	fixups []fixup
}

// fixup is a reference to a label, resolved by Link.
type fixup struct {
	at    int    // offset of the field
	size  int    // 1, 4 or 8 bytes
	label string // target
	pcrel bool   // relative to the end of the field, else absolute
	base  uint64 // for absolute: the address of code[0]
}

// Emit appends bytes.
func (a *Asm) Emit(b ...byte) *Asm { a.code = append(a.code, b...); return a }

// Len is the number of bytes emitted so far: the next byte's offset.
func (a *Asm) Len() int { return len(a.code) }

// Addr returns label's address, the code being loaded at base.
func (a *Asm) Addr(label string, base uint64) (uint64, error) {
	at, ok := a.labels[label]
	if !ok {
		return 0, fmt.Errorf("tinyelf: undefined label %q", label)
	}
	return base + uint64(at), nil
}

// U32 appends a little-endian 32-bit value.
func (a *Asm) U32(v uint32) *Asm { a.code = binary.LittleEndian.AppendUint32(a.code, v); return a }

// U64 appends a little-endian 64-bit value.
func (a *Asm) U64(v uint64) *Asm { a.code = binary.LittleEndian.AppendUint64(a.code, v); return a }

// Label names the next byte.
func (a *Asm) Label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.code)
}

func (a *Asm) ref(label string, size int, pcrel bool, base uint64) *Asm {
	a.fixups = append(a.fixups, fixup{at: len(a.code), size: size, label: label, pcrel: pcrel, base: base})
	a.code = append(a.code, make([]byte, size)...)
	return a
}

// Rel8 appends a jump displacement to label, relative to the next byte.
func (a *Asm) Rel8(label string) *Asm { return a.ref(label, 1, true, 0) }

// Rel32 appends a 32-bit displacement to label, relative to the next byte.
func (a *Asm) Rel32(label string) *Asm { return a.ref(label, 4, true, 0) }

// Abs64 appends label's address, the code being loaded at base.
func (a *Asm) Abs64(label string, base uint64) *Asm { return a.ref(label, 8, false, base) }

// Link resolves the label references and returns the code.
func (a *Asm) Link() ([]byte, error) {
	for _, f := range a.fixups {
		target, ok := a.labels[f.label]
		if !ok {
			return nil, fmt.Errorf("tinyelf: undefined label %q", f.label)
		}
		switch {
		case !f.pcrel:
			binary.LittleEndian.PutUint64(a.code[f.at:], f.base+uint64(target))
		case f.size == 4:
			binary.LittleEndian.PutUint32(a.code[f.at:], uint32(int32(target-(f.at+4))))
		case f.size == 1:
			d := target - (f.at + 1)
			if d < -128 || d > 127 {
				return nil, fmt.Errorf("tinyelf: jump to %q out of range", f.label)
			}
			a.code[f.at] = byte(int8(d))
		}
	}
	return a.code, nil
}
