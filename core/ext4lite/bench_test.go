package ext4lite

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchDir makes a volume with a directory of n entries.
func benchDir(b *testing.B, n, extra int) (*FS, Ino) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.img")
	if err := Create(path, 4<<30); err != nil {
		b.Fatal(err)
	}
	fs, err := OpenVolume(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fs.Close() })
	dir, err := fs.Mkdir(RootIno, "dir", 0o755, Owner{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n + extra {
		if _, err := fs.Create(dir, fmt.Sprintf("entry-%08d", i), 0o644, Owner{}); err != nil {
			b.Fatal(err)
		}
	}
	if err := fs.Sync(); err != nil {
		b.Fatal(err)
	}
	return fs, dir
}

// BenchmarkDirectory measures create, stat (lookup + stat) and unlink in
// directories of 1k and 100k entries.
func BenchmarkDirectory(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("create/%d", n), func(b *testing.B) {
			fs, dir := benchDir(b, n, 0)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := fs.Create(dir, fmt.Sprintf("new-%08d", i), 0o644, Owner{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("stat/%d", n), func(b *testing.B) {
			fs, dir := benchDir(b, n, 0)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ino, err := fs.Lookup(dir, fmt.Sprintf("entry-%08d", (i*7919)%n))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := fs.Stat(ino); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("unlink/%d", n), func(b *testing.B) {
			fs, dir := benchDir(b, n, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := fs.Unlink(dir, fmt.Sprintf("entry-%08d", n+i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClone4GiB measures cloning a 4 GiB golden.
func BenchmarkClone4GiB(b *testing.B) {
	dir := b.TempDir()
	golden := filepath.Join(dir, "golden.ext4")
	if err := Create(golden, 4<<30); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ep := filepath.Join(dir, fmt.Sprintf("ep%d", i))
		if _, err := Clone(golden, ep); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.Remove(ep)
		b.StartTimer()
	}
}

func benchVolume(b *testing.B, size int64) *FS {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.img")
	if err := Create(path, size); err != nil {
		b.Fatal(err)
	}
	fs, err := OpenVolume(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fs.Close() })
	return fs
}

// BenchmarkSequentialWrite writes a file in 1 MiB chunks.
func BenchmarkSequentialWrite(b *testing.B) {
	fs := benchVolume(b, 8<<30)
	ino, _ := fs.Create(RootIno, "f", 0o644, Owner{})
	chunk := make([]byte, 1<<20)
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := fs.WriteAt(ino, chunk, int64(i)*int64(len(chunk))); err != nil {
			b.Fatal(err)
		}
	}
	if err := fs.Sync(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSequentialRead reads a 256 MiB file in 1 MiB chunks.
func BenchmarkSequentialRead(b *testing.B) {
	fs := benchVolume(b, 1<<30)
	ino, _ := fs.Create(RootIno, "f", 0o644, Owner{})
	chunk := make([]byte, 1<<20)
	for i := range 256 {
		fs.WriteAt(ino, chunk, int64(i)<<20)
	}
	fs.Sync()
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := fs.ReadAt(ino, chunk, int64(i%256)<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSmallFiles creates 4 KiB files, as unpacking an image does;
// with fsync, as a database or dockerd writing its state does.
func BenchmarkSmallFiles(b *testing.B) {
	for _, fsync := range []bool{false, true} {
		b.Run(fmt.Sprintf("fsync=%v", fsync), func(b *testing.B) {
			fs := benchVolume(b, 4<<30)
			data := make([]byte, 4096)
			dir := RootIno
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%1000 == 0 {
					dir, _ = fs.Mkdir(RootIno, fmt.Sprintf("d%d", i), 0o755, Owner{})
				}
				ino, err := fs.Create(dir, fmt.Sprintf("f%d", i), 0o644, Owner{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := fs.WriteAt(ino, data, 0); err != nil {
					b.Fatal(err)
				}
				if fsync {
					if err := fs.Fsync(ino); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
