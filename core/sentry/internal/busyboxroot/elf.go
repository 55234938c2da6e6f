package busyboxroot

import "encoding/binary"

// GeteuidELF returns a minimal static x86-64 executable that exits with
// its effective user ID (modulo 256) as the status. Installed set-user-ID
// root, it shows whether the kernel honoured the bit: status 0 if it did.
func GeteuidELF() []byte {
	const base = 0x400000
	code := []byte{
		0xb8, 0x6b, 0x00, 0x00, 0x00, // mov eax, 107 (geteuid)
		0x0f, 0x05, // syscall
		0x89, 0xc7, // mov edi, eax
		0xb8, 0x3c, 0x00, 0x00, 0x00, // mov eax, 60 (exit)
		0x0f, 0x05, // syscall
	}
	const ehSize, phSize = 64, 56
	entry := uint64(base + ehSize + phSize)
	b := make([]byte, ehSize+phSize, ehSize+phSize+len(code))
	le := binary.LittleEndian
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* LE */, 1 /* version */})
	le.PutUint16(b[16:], 2)    // ET_EXEC
	le.PutUint16(b[18:], 0x3e) // EM_X86_64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], entry)
	le.PutUint64(b[32:], ehSize) // program headers follow the header
	le.PutUint16(b[52:], ehSize)
	le.PutUint16(b[54:], phSize)
	le.PutUint16(b[56:], 1)
	ph := b[ehSize:]
	le.PutUint32(ph[0:], 1) // PT_LOAD
	le.PutUint32(ph[4:], 5) // PF_R|PF_X
	le.PutUint64(ph[8:], 0) // offset
	le.PutUint64(ph[16:], base)
	le.PutUint64(ph[24:], base)
	size := uint64(ehSize + phSize + len(code))
	le.PutUint64(ph[32:], size)
	le.PutUint64(ph[40:], size)
	le.PutUint64(ph[48:], 0x1000)
	return append(b, code...)
}
