package ext4lite

import (
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/ext4lite/blockdev"
	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// fuzzBase is a small image with a bit of everything, and the blocks
// worth corrupting (all that are not zero).
var fuzzBase struct {
	once   sync.Once
	image  []byte
	blocks []uint64
	err    error
}

func fuzzImage() ([]byte, []uint64, error) {
	fuzzBase.once.Do(func() {
		dev := blockdev.NewMemory(minMkfsBlocks * mkfsBlockSize)
		if err := Mkfs(dev, MkfsOptions{Zeroed: true, Now: fixedTime}); err != nil {
			fuzzBase.err = err
			return
		}
		fs, err := Open(dev, Options{Now: nowFixed, Generation: 1})
		if err != nil {
			fuzzBase.err = err
			return
		}
		populateFuzz(fs)
		// Leave a committed transaction in the journal too.
		fs.Sync()
		fs.Create(RootIno, "in-journal", 0o644, Owner{})
		fs.Sync()
		fs.mu.Lock()
		fs.closed = true
		fs.mu.Unlock()
		fuzzBase.image = dev.Bytes()
		for blk := uint64(0); blk < minMkfsBlocks; blk++ {
			b := fuzzBase.image[blk*mkfsBlockSize : (blk+1)*mkfsBlockSize]
			for _, c := range b {
				if c != 0 {
					fuzzBase.blocks = append(fuzzBase.blocks, blk)
					break
				}
			}
		}
	})
	return fuzzBase.image, fuzzBase.blocks, fuzzBase.err
}

// populateFuzz gives a filesystem files, directories (one spilling into
// several blocks), links, devices, xattrs in the inode and in a block, and
// a file with an extent tree of depth one.
func populateFuzz(fs *FS) {
	d, _ := fs.Mkdir(RootIno, "dir", 0o755, Owner{})
	for i := range 150 {
		fs.Create(d, fmt.Sprintf("file-with-some-name-%d", i), 0o644, Owner{})
	}
	f, _ := fs.Create(RootIno, "frag", 0o644, Owner{})
	for i := range 12 {
		fs.WriteAt(f, []byte("fragment"), int64(i)*3*4096)
	}
	fs.SetXattr(f, "user.small", []byte("v"), 0)
	fs.SetXattr(f, "trusted.large", make([]byte, 900), 0)
	fs.Symlink(RootIno, "slow", string(make([]byte, 80)), Owner{})
	fs.Symlink(RootIno, "fast", "frag", Owner{})
	fs.Mknod(RootIno, "chr", S_IFCHR|0o600, Dev{1, 3}, Owner{})
	fs.Link(d, "hard", f)
	fs.Fallocate(f, FallocKeepSize, 200000, 10000)
}

// FuzzImage opens corrupted images and uses them; it must get errors, not
// panics or hangs. The input is a list of patches: a block selector (which
// non-zero block of the base image), an offset and bytes to write there.
// Checksums are not verified, so corruption reaches every parser; the
// superblock checksum is fixed up so the superblock still parses.
func FuzzImage(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0x04, 0x60, 4, 0xFF, 0xFF, 0xFF, 0xFF})
	f.Add([]byte{5, 0, 0, 0x28, 8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0x10, 2, 0xFF, 0xFF})
	f.Fuzz(func(t *testing.T, patch []byte) {
		// An endless loop is a bug too: crash with the stacks so the
		// fuzzer keeps the input.
		watchdog := time.AfterFunc(20*time.Second, func() {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			panic(fmt.Sprintf("FuzzImage input ran for 20s:\n%s", buf[:n]))
		})
		defer watchdog.Stop()
		base, blocks, err := fuzzImage()
		if err != nil {
			t.Fatal(err)
		}
		img := append([]byte(nil), base...)
		for len(patch) >= 5 {
			blk := blocks[int(binary.LittleEndian.Uint16(patch))%len(blocks)]
			off := int(binary.LittleEndian.Uint16(patch[2:])) % mkfsBlockSize
			n := min(int(patch[4]), len(patch)-5)
			copy(img[int(blk)*mkfsBlockSize+off:], patch[5:5+n])
			patch = patch[5+n:]
		}
		var sb disk.Superblock
		copy(sb[:], img[disk.SuperblockOffset:])
		sb.UpdateChecksum()
		copy(img[disk.SuperblockOffset:], sb[:])

		for _, ro := range []bool{true, false} {
			dev := blockdev.NewMemoryFrom(img)
			fs, err := Open(dev, Options{ReadOnly: ro, skipChecksums: true, Now: nowFixed})
			if err != nil {
				continue
			}
			inodes := exploreFuzz(fs)
			if !ro {
				mutateFuzz(fs, inodes)
			}
			fs.Close()
		}
	})
}

// exploreFuzz walks the tree, reading everything, within bounds.
func exploreFuzz(fs *FS) []Ino {
	var found []Ino
	seen := map[Ino]bool{}
	var walk func(dir Ino, depth int)
	walk = func(dir Ino, depth int) {
		if depth > 8 || len(found) > 400 || seen[dir] {
			return
		}
		seen[dir] = true
		var ents []Dirent
		fs.ReadDir(dir, 0, func(d Dirent) bool {
			ents = append(ents, d)
			return len(ents) < 300
		})
		for _, e := range ents {
			if e.Name == "." || e.Name == ".." {
				continue
			}
			ino, err := fs.Lookup(dir, e.Name)
			if err != nil {
				continue
			}
			found = append(found, ino)
			st, err := fs.Stat(ino)
			if err != nil {
				continue
			}
			fs.ListXattr(ino)
			fs.GetXattr(ino, "user.small")
			fs.GetXattr(ino, "system.posix_acl_access")
			switch st.Mode & S_IFMT {
			case S_IFDIR:
				walk(ino, depth+1)
			case S_IFLNK:
				fs.Readlink(ino)
			case S_IFREG:
				buf := make([]byte, 64<<10)
				if _, err := fs.ReadAt(ino, buf, 0); err != nil && err != io.EOF {
					continue
				}
				fs.ReadAt(ino, buf, int64(st.Size/2))
			}
		}
	}
	walk(RootIno, 0)
	fs.Statfs()
	return found
}

// mutateFuzz changes a corrupt filesystem in every way it can.
func mutateFuzz(fs *FS, inodes []Ino) {
	fs.Create(RootIno, "new", 0o644, Owner{})
	d, _ := fs.Mkdir(RootIno, "newdir", 0o755, Owner{})
	fs.Rename(RootIno, "dir", d, "moved", 0)
	fs.Rename(d, "moved", RootIno, "frag", RenameExchange)
	for i, ino := range inodes {
		if i > 40 {
			break
		}
		fs.WriteAt(ino, []byte("overwrite"), int64(i*1000))
		fs.Truncate(ino, int64(i*777))
		fs.SetXattr(ino, "user.x", make([]byte, i*37), 0)
		fs.RemoveXattr(ino, "trusted.large")
		fs.Fallocate(ino, FallocPunchHole|FallocKeepSize, 0, 5000)
		fs.SetAttr(ino, SetAttr{Mask: SetMode, Mode: 0o600})
	}
	fs.Unlink(RootIno, "frag")
	fs.Unlink(RootIno, "slow")
	fs.Rmdir(RootIno, "dir")
	fs.Sync()
}
