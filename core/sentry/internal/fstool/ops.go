package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// listXattrs returns every path's extended attributes under dir.
func listXattrs(dir string) (map[string]map[string]string, error) {
	out := make(map[string]map[string]string)
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			rel = ""
		}
		buf := make([]byte, 64<<10)
		n, err := unix.Llistxattr(p, buf)
		if err != nil {
			return fmt.Errorf("listxattr %s: %w", p, err)
		}
		for _, name := range strings.Split(string(buf[:n]), "\x00") {
			if name == "" {
				continue
			}
			v := make([]byte, 64<<10)
			m, err := unix.Lgetxattr(p, name, v)
			if err != nil {
				return fmt.Errorf("getxattr %s %s: %w", p, name, err)
			}
			if out[rel] == nil {
				out[rel] = make(map[string]string)
			}
			out[rel][name] = string(v[:m])
		}
		return nil
	})
	return out, err
}

func setXattr(path, name, value string) error {
	return unix.Lsetxattr(path, name, []byte(value), 0)
}

func getXattr(path, name string) (string, error) {
	v := make([]byte, 64<<10)
	n, err := unix.Lgetxattr(path, name, v)
	if err != nil {
		return "", err
	}
	return string(v[:n]), nil
}

func rename2(oldPath, newPath, how string) error {
	flags := map[string]uint{"exchange": unix.RENAME_EXCHANGE, "noreplace": unix.RENAME_NOREPLACE, "whiteout": unix.RENAME_WHITEOUT, "none": 0}
	f, ok := flags[how]
	if !ok {
		return fmt.Errorf("rename: unknown flag %q", how)
	}
	return unix.Renameat2(unix.AT_FDCWD, oldPath, unix.AT_FDCWD, newPath, f)
}

// tmpfile makes an unnamed file in dir, writes it, then names it.
func tmpfile(dir, name string) error {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR, 0o640)
	if err != nil {
		return fmt.Errorf("open O_TMPFILE: %w", err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte("made by O_TMPFILE\n")); err != nil {
		return err
	}
	return unix.Linkat(fd, "", unix.AT_FDCWD, filepath.Join(dir, name), unix.AT_EMPTY_PATH)
}

// mmapCheck writes a file through a shared mapping and checks read(2)
// sees it, that a private mapping's writes stay private, and that writes
// through write(2) show in an existing mapping.
func mmapCheck(path string) error {
	const size = 3*4096 + 100
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	shared, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap shared: %w", err)
	}
	for i := range shared {
		shared[i] = byte(i % 251)
	}
	if err := unix.Msync(shared, unix.MS_SYNC); err != nil {
		return fmt.Errorf("msync: %w", err)
	}
	got := make([]byte, size)
	if _, err := f.ReadAt(got, 0); err != nil {
		return err
	}
	if !bytes.Equal(got, shared) {
		return fmt.Errorf("read(2) does not see the stores through MAP_SHARED")
	}
	if _, err := f.WriteAt([]byte("WRITTEN"), 4096); err != nil {
		return err
	}
	if string(shared[4096:4103]) != "WRITTEN" {
		return fmt.Errorf("the mapping does not see write(2): %q", shared[4096:4103])
	}
	private, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("mmap private: %w", err)
	}
	private[0] = 'P'
	if shared[0] == 'P' {
		return fmt.Errorf("a MAP_PRIVATE store reached the file")
	}
	unix.Munmap(private)
	shared[1] = 'S'
	if err := unix.Munmap(shared); err != nil {
		return err
	}
	// Unmapped without msync: the store must still reach the file.
	if _, err := f.ReadAt(got[:2], 0); err != nil {
		return err
	}
	if got[0] != 0 || got[1] != 'S' {
		return fmt.Errorf("after munmap the file starts %q, want \"\\x00S\"", got[:2])
	}
	fmt.Println("mmap ok")
	return nil
}

// bench creates, stats and unlinks n files in dir and prints the rates.
func bench(dir string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = filepath.Join(dir, fmt.Sprintf("f%07d", i))
	}
	rate := func(what string, op func(string) error) error {
		start := time.Now()
		for _, p := range names {
			if err := op(p); err != nil {
				return fmt.Errorf("%s %s: %w", what, p, err)
			}
		}
		d := time.Since(start)
		fmt.Printf("%s %d %.0f/s\n", what, n, float64(n)/d.Seconds())
		return nil
	}
	if err := rate("create", func(p string) error {
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
		if err == nil {
			err = unix.Close(fd)
		}
		return err
	}); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := rate("stat", func(p string) error { return unix.Lstat(p, &st) }); err != nil {
		return err
	}
	return rate("unlink", unix.Unlink)
}

func utimens(path string, sec, nsec int64) error {
	ts := []unix.Timespec{{Sec: sec, Nsec: nsec}, {Sec: sec, Nsec: nsec}}
	return unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, unix.AT_SYMLINK_NOFOLLOW)
}

func fallocate(path string, mode uint32, off, length int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fallocate(int(f.Fd()), mode, off, length)
}
