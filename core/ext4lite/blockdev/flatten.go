package blockdev

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/cleanup"
)

// Flatten writes the image a delta represents to outPath as a standalone,
// sparse image. outPath is replaced atomically (written under a temporary
// name in the same directory, then renamed). The delta should not be
// written concurrently.
func Flatten(d *Delta, outPath string) error {
	tmp, err := os.CreateTemp(filepath.Dir(outPath), filepath.Base(outPath)+".flatten-*")
	if err != nil {
		return fmt.Errorf("blockdev: flatten: %w", err)
	}
	cu := cleanup.Make(func() {
		tmp.Close()
		os.Remove(tmp.Name())
	})
	defer cu.Clean()

	// Share the golden's extents when the host can; copy its data
	// segments otherwise.
	if err := unix.IoctlFileClone(int(tmp.Fd()), int(d.golden.Fd())); err != nil {
		if !reflinkUnsupported(err) {
			return fmt.Errorf("blockdev: flatten: reflink golden: %w", err)
		}
		if err := copySparse(tmp, d.golden, d.Size()); err != nil {
			return err
		}
	}
	if err := tmp.Truncate(d.Size()); err != nil {
		return fmt.Errorf("blockdev: flatten: %w", err)
	}
	if err := d.copyDirtyTo(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("blockdev: flatten: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("blockdev: flatten: %w", err)
	}
	if err := os.Rename(tmp.Name(), outPath); err != nil {
		return fmt.Errorf("blockdev: flatten: %w", err)
	}
	cu.Release()
	return nil
}

// copyDirtyTo writes every block the delta holds into out at its offset.
func (d *Delta) copyDirtyTo(out *os.File) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	nblocks := (d.Size() + deltaBlockSize - 1) / deltaBlockSize
	buf := make([]byte, 256*deltaBlockSize)
	for blk := int64(0); blk < nblocks; {
		if !d.isDirty(blk) {
			blk++
			continue
		}
		end := blk
		for end < nblocks && d.isDirty(end) && end-blk < int64(len(buf)/deltaBlockSize) {
			end++
		}
		n := min(end*deltaBlockSize, d.Size()) - blk*deltaBlockSize
		if _, err := d.delta.ReadAt(buf[:n], d.hdr.dataOff+blk*deltaBlockSize); err != nil {
			return fmt.Errorf("blockdev: flatten: read delta: %w", err)
		}
		if _, err := out.WriteAt(buf[:n], blk*deltaBlockSize); err != nil {
			return fmt.Errorf("blockdev: flatten: %w", err)
		}
		blk = end
	}
	return nil
}

// copySparse copies the data segments of src (found with SEEK_DATA and
// SEEK_HOLE) to the same offsets in dst, leaving holes as holes.
func copySparse(dst, src *os.File, size int64) error {
	sfd := int(src.Fd())
	for off := int64(0); off < size; {
		start, err := unix.Seek(sfd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			return nil // only a hole is left
		}
		if err != nil {
			// No SEEK_DATA support: copy everything.
			return copyRange(dst, src, off, size-off)
		}
		end, err := unix.Seek(sfd, start, unix.SEEK_HOLE)
		if err != nil {
			end = size
		}
		end = min(end, size)
		if err := copyRange(dst, src, start, end-start); err != nil {
			return err
		}
		off = end
	}
	return nil
}

// copyRange copies [off, off+n) from src to dst, in the kernel when it can.
func copyRange(dst, src *os.File, off, n int64) error {
	roff, woff := off, off
	for n > 0 {
		c, err := unix.CopyFileRange(int(src.Fd()), &roff, int(dst.Fd()), &woff, int(min(n, 1<<30)), 0)
		if err != nil || c == 0 {
			return copyRangeByHand(dst, src, roff, n)
		}
		n -= int64(c)
	}
	return nil
}

func copyRangeByHand(dst, src *os.File, off, n int64) error {
	buf := make([]byte, 1<<20)
	for n > 0 {
		c := int(min(n, int64(len(buf))))
		if _, err := src.ReadAt(buf[:c], off); err != nil && err != io.EOF {
			return fmt.Errorf("blockdev: copy: %w", err)
		}
		if _, err := dst.WriteAt(buf[:c], off); err != nil {
			return fmt.Errorf("blockdev: copy: %w", err)
		}
		off += int64(c)
		n -= int64(c)
	}
	return nil
}

// CopyImage copies the plain image src to dst (replaced atomically),
// sharing extents by reflink where possible and keeping holes.
func CopyImage(src, dst string) error {
	in, err := openImage(src, true)
	if err != nil {
		return fmt.Errorf("blockdev: copy image: %w", err)
	}
	defer in.Close()
	if err := lockImage(in, true); err != nil {
		return err
	}
	size, err := in.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("blockdev: copy image: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".copy-*")
	if err != nil {
		return fmt.Errorf("blockdev: copy image: %w", err)
	}
	cu := cleanup.Make(func() {
		tmp.Close()
		os.Remove(tmp.Name())
	})
	defer cu.Clean()
	if err := unix.IoctlFileClone(int(tmp.Fd()), int(in.Fd())); err != nil {
		if !reflinkUnsupported(err) {
			return fmt.Errorf("blockdev: copy image: reflink: %w", err)
		}
		if err := copySparse(tmp, in, size); err != nil {
			return err
		}
	}
	if err := tmp.Truncate(size); err != nil {
		return fmt.Errorf("blockdev: copy image: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("blockdev: copy image: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("blockdev: copy image: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("blockdev: copy image: %w", err)
	}
	cu.Release()
	return nil
}
