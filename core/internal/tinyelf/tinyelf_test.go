package tinyelf

import (
	"bytes"
	"debug/elf"
	"strings"
	"testing"
)

func TestExecutableIsAStaticELF(t *testing.T) {
	var a Asm
	a.Label("top")
	a.Emit(0x31, 0xff)       // xor edi, edi
	a.Emit(0xeb).Rel8("top") // jmp top
	a.Label("data")
	a.Abs64("data", CodeAddr)
	code, err := a.Link()
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x31, 0xff, 0xeb, 0xfc}; !bytes.Equal(code[:4], want) {
		t.Errorf("code starts % x; want % x (jmp back 4 bytes)", code[:4], want)
	}
	if got := uint64(code[4]) | uint64(code[5])<<8 | uint64(code[6])<<16; got != CodeAddr+4 {
		t.Errorf("the absolute reference is %#x; want %#x", got, CodeAddr+4)
	}

	f, err := elf.NewFile(bytes.NewReader(Executable(code)))
	if err != nil {
		t.Fatalf("debug/elf rejects the executable: %v", err)
	}
	if f.Type != elf.ET_EXEC || f.Machine != elf.EM_X86_64 || f.Entry != CodeAddr {
		t.Errorf("type %v, machine %v, entry %#x; want ET_EXEC, EM_X86_64, %#x", f.Type, f.Machine, f.Entry, uint64(CodeAddr))
	}
	if len(f.Progs) != 1 || f.Progs[0].Type != elf.PT_LOAD || f.Progs[0].Vaddr != Base || f.Progs[0].Flags != elf.PF_R|elf.PF_X {
		t.Fatalf("program headers %+v; want one readable, executable PT_LOAD at %#x", f.Progs, Base)
	}
	seg := make([]byte, f.Progs[0].Filesz)
	if _, err := f.Progs[0].ReadAt(seg, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(seg[CodeAddr-Base:], code) {
		t.Error("the segment does not hold the code at CodeAddr")
	}
}

func TestLinkErrors(t *testing.T) {
	var a Asm
	a.Emit(0xe9).Rel32("nowhere")
	if _, err := a.Link(); err == nil || !strings.Contains(err.Error(), `"nowhere"`) {
		t.Errorf("Link with an undefined label: %v", err)
	}
	var far Asm
	far.Emit(0xeb).Rel8("far")
	far.Emit(make([]byte, 200)...)
	far.Label("far")
	if _, err := far.Link(); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("Link with a short jump of 200 bytes: %v", err)
	}
}
