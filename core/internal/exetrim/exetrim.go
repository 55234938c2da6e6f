// Package exetrim lets a long-lived process give back the page-table entries
// of its executable's read-only mappings once start-up is done.
//
// A Go binary's package initialisers and a sandbox's boot touch most of the
// executable's text and read-only data, and the kernel maps 64 KiB around
// every file fault, so an idle rungv keeps ~26 MiB of the binary mapped of
// which it will not touch most again. Those pages are clean and shared in
// the page cache; dropping this process's mappings of them costs nothing but
// a minor fault for each page it uses again, and leaves the process's
// proportional set size at what it actually uses while idle.
package exetrim

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Ranges are the executable's read-only file mappings: text and read-only
// data. Writable mappings are never included, since dropping their private
// pages would lose what the process wrote.
type Ranges struct {
	spans []span
}

type span struct{ start, end uintptr }

// Find reads /proc/self/maps for the read-only mappings of the running
// executable. It opens a file, so it must run before the process locks
// itself down.
func Find() (*Ranges, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("finding the executable: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("reading the process's mappings: %w", err)
	}
	defer f.Close()
	return parseMaps(bufio.NewScanner(f), exe)
}

func parseMaps(sc *bufio.Scanner, exe string) (*Ranges, error) {
	r := &Ranges{}
	for sc.Scan() {
		// 00400000-01283000 r-xp 00000000 fe:00 10152293   /path/to/exe
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || strings.Join(fields[5:], " ") != exe {
			continue
		}
		perms := fields[1]
		if len(perms) < 4 || perms[0] != 'r' || perms[1] != '-' || perms[3] != 'p' {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("malformed /proc/self/maps line %q", sc.Text())
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("malformed /proc/self/maps line %q", sc.Text())
		}
		r.spans = append(r.spans, span{uintptr(start), uintptr(end)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the process's mappings: %w", err)
	}
	return r, nil
}

// Len is the number of bytes the ranges cover.
func (r *Ranges) Len() uintptr {
	var n uintptr
	for _, s := range r.spans {
		n += s.end - s.start
	}
	return n
}
