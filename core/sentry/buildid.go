package sentry

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// A snapshot holds gVisor's encoding of kernel objects, whose layout is
// that of the types compiled into the binary that wrote it: gVisor's and
// gvx's own (the savable types in this package, ext4fs and netstack). Only
// the same build decodes it for certain, so a snapshot records the build
// and Restore refuses another one by name instead of failing somewhere in
// the decoding.

// executableBuildID returns an identity of the running executable: the Go
// toolchain's build ID, a hash of every input of the build, or, for a
// binary without one, a SHA-256 of the executable.
//
// Preconditions: the process may still open files (before lockdown).
func executableBuildID() (string, error) {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return "", fmt.Errorf("sentry: opening the executable to identify its build: %w", err)
	}
	defer f.Close()
	if id, ok := goBuildID(f); ok {
		return "go:" + id, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<40)); err != nil {
		return "", fmt.Errorf("sentry: hashing the executable to identify its build: %w", err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// goBuildID reads the build ID note the Go linker writes into ELF
// executables (section .note.go.buildid: name "Go", type 4).
func goBuildID(r io.ReaderAt) (string, bool) {
	ef, err := elf.NewFile(r)
	if err != nil {
		return "", false
	}
	defer ef.Close()
	sec := ef.Section(".note.go.buildid")
	if sec == nil {
		return "", false
	}
	note, err := sec.Data()
	if err != nil || len(note) < 16 {
		return "", false
	}
	nameSize := ef.ByteOrder.Uint32(note[0:])
	descSize := ef.ByteOrder.Uint32(note[4:])
	noteType := ef.ByteOrder.Uint32(note[8:])
	const goBuildIDNote = 4
	name := align4(uint64(nameSize))
	if noteType != goBuildIDNote || uint64(len(note)) < 12+name+uint64(descSize) {
		return "", false
	}
	if !bytes.Equal(bytes.TrimRight(note[12:12+nameSize], "\x00"), []byte("Go")) {
		return "", false
	}
	id := note[12+name : 12+name+uint64(descSize)]
	if len(id) == 0 {
		return "", false
	}
	return string(id), true
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }
