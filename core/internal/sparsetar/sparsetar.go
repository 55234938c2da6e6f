// Package sparsetar moves files with holes through tar streams: it writes
// them as PAX GNU sparse 1.0 entries (what `tar --sparse --format=pax`
// writes), which archive/tar reads but cannot write, so that a hole costs
// nothing in transit, and writes such an entry's content back with its
// holes.
package sparsetar

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
)

// BlockSize is the unit holes are found and made in.
const BlockSize = 4096

// maxSegments bounds a sparse map: archive/tar refuses one over 1 MiB
// (about 24,000 segments at most), and GNU tar's is as small. Past it, the
// rest of a file travels as one segment, its zeros included.
const maxSegments = 16384

// Segment is a run of a file's data; what lies between segments is a
// hole, which reads as zeros.
type Segment struct{ Off, Len int64 }

// Writer is a tar.Writer that also writes sparse regular files.
type Writer struct {
	tw *tar.Writer
	w  io.Writer
	// left is what the current sparse entry's data still lacks; pad the
	// zeros that complete its last block.
	left, pad int64
	inSparse  bool
}

// NewWriter returns a Writer writing to w.
func NewWriter(w io.Writer) *Writer { return &Writer{tw: tar.NewWriter(w), w: w} }

// WriteHeader starts an ordinary entry, as tar.Writer.WriteHeader does.
func (sw *Writer) WriteHeader(hdr *tar.Header) error {
	if err := sw.endSparse(); err != nil {
		return err
	}
	return sw.tw.WriteHeader(hdr)
}

// Write writes the current entry's content: for a sparse entry, its
// data segments' bytes one after the other.
func (sw *Writer) Write(p []byte) (int, error) {
	if !sw.inSparse {
		return sw.tw.Write(p)
	}
	if int64(len(p)) > sw.left {
		return 0, tar.ErrWriteTooLong
	}
	n, err := sw.w.Write(p)
	sw.left -= int64(n)
	return n, err
}

// Close ends the archive, as tar.Writer.Close does.
func (sw *Writer) Close() error {
	if err := sw.endSparse(); err != nil {
		return err
	}
	return sw.tw.Close()
}

func (sw *Writer) endSparse() error {
	if !sw.inSparse {
		return nil
	}
	if sw.left > 0 {
		return fmt.Errorf("archive/tar: missed writing %d bytes", sw.left)
	}
	sw.inSparse = false
	_, err := sw.w.Write(make([]byte, sw.pad))
	return err
}

// WriteFileHeader starts the regular file hdr whose data is data: an
// ordinary entry if data is the whole file, else a sparse one
// (WriteSparseHeader).
func (sw *Writer) WriteFileHeader(hdr *tar.Header, data []Segment) error {
	if len(data) == 1 && data[0] == (Segment{Off: 0, Len: hdr.Size}) {
		return sw.WriteHeader(hdr)
	}
	return sw.WriteSparseHeader(hdr, data)
}

// WriteSparseHeader starts the regular file hdr (Size its length) whose
// data is data, in order, the rest holes; Write then takes the segments'
// bytes. Name, Mode, Uid, Gid, Uname, Gname and ModTime are kept.
func (sw *Writer) WriteSparseHeader(hdr *tar.Header, data []Segment) error {
	if err := sw.endSparse(); err != nil {
		return err
	}
	// tar.Writer writes straight to w: once its entry is padded, the
	// blocks below follow it.
	if err := sw.tw.Flush(); err != nil {
		return err
	}
	if n := len(data); n == 0 || data[n-1].Off+data[n-1].Len < hdr.Size {
		// GNU tar sizes the file by the map's last segment: one of no
		// length at the end stands for a trailing hole, as its own
		// archives have.
		data = append(data[:n:n], Segment{hdr.Size, 0})
	}
	var spMap bytes.Buffer
	fmt.Fprintf(&spMap, "%d\n", len(data))
	var dataSize int64
	for _, s := range data {
		fmt.Fprintf(&spMap, "%d\n%d\n", s.Off, s.Len)
		dataSize += s.Len
	}
	spMap.Write(make([]byte, padding(int64(spMap.Len()))))
	stored := int64(spMap.Len()) + dataSize

	recs := []string{
		record("GNU.sparse.major", "1"),
		record("GNU.sparse.minor", "0"),
		record("GNU.sparse.name", hdr.Name),
		record("GNU.sparse.realsize", strconv.FormatInt(hdr.Size, 10)),
		record("mtime", paxTime(hdr)),
		record("uid", strconv.Itoa(hdr.Uid)),
		record("gid", strconv.Itoa(hdr.Gid)),
	}
	if hdr.Uname != "" {
		recs = append(recs, record("uname", hdr.Uname))
	}
	if hdr.Gname != "" {
		recs = append(recs, record("gname", hdr.Gname))
	}
	if stored >= 1<<33 {
		recs = append(recs, record("size", strconv.FormatInt(stored, 10))) // past the octal field
	}
	pax := strings.Join(recs, "")
	base := path.Base(hdr.Name)
	blocks := [][]byte{
		ustar("./PaxHeaders.0/"+base, 'x', 0o644, int64(len(pax)), hdr),
		[]byte(pax), make([]byte, padding(int64(len(pax)))),
		ustar("./GNUSparseFile.0/"+base, tar.TypeReg, hdr.Mode, stored, hdr),
		spMap.Bytes(),
	}
	for _, b := range blocks {
		if _, err := sw.w.Write(b); err != nil {
			return err
		}
	}
	sw.inSparse, sw.left, sw.pad = true, dataSize, padding(stored)
	return nil
}

// padding is what completes a 512-byte tar block after n bytes.
func padding(n int64) int64 { return -n & 511 }

// record formats a PAX record, whose length counts itself.
func record(k, v string) string {
	size := len(k) + len(v) + 3 // ' ', '=', '\n'
	size += len(strconv.Itoa(size))
	if len(strconv.Itoa(size)) > len(strconv.Itoa(size-1)) {
		size++
	}
	return fmt.Sprintf("%d %s=%s\n", size, k, v)
}

func paxTime(hdr *tar.Header) string {
	sec, nsec := hdr.ModTime.Unix(), hdr.ModTime.Nanosecond()
	if nsec == 0 || sec < 0 {
		return strconv.FormatInt(sec, 10)
	}
	return strings.TrimRight(fmt.Sprintf("%d.%09d", sec, nsec), "0")
}

// ustar returns a USTAR header block. Names are cut to fit and numbers
// that do not fit are left zero: the PAX records before it carry both.
func ustar(name string, flag byte, mode, size int64, hdr *tar.Header) []byte {
	b := make([]byte, 512)
	octal := func(field []byte, v int64) {
		if v < 0 || len(strconv.FormatInt(v, 8)) > len(field)-1 {
			v = 0
		}
		copy(field, fmt.Sprintf("%0*o", len(field)-1, v))
	}
	copy(b[0:100], name)
	octal(b[100:108], mode&0o7777)
	octal(b[108:116], int64(hdr.Uid))
	octal(b[116:124], int64(hdr.Gid))
	octal(b[124:136], size)
	octal(b[136:148], hdr.ModTime.Unix())
	b[156] = flag
	copy(b[257:265], "ustar\x0000")
	copy(b[265:297], hdr.Uname)
	copy(b[297:329], hdr.Gname)
	copy(b[148:156], "        ")
	var sum int64
	for _, c := range b {
		sum += int64(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// IsSparse reports whether the entry hdr, read by tar.Reader, was stored
// as a sparse file (GNU or PAX): its holes then read as zeros.
func IsSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for _, k := range []string{"GNU.sparse.major", "GNU.sparse.map", "GNU.sparse.numblocks"} {
		if hdr.PAXRecords[k] != "" {
			return true
		}
	}
	return false
}

// addData appends the data run [off, end) to segs, merged with the last
// run if they touch; past maxSegments the last run grows instead.
func addData(segs []Segment, off, end int64) []Segment {
	if n := len(segs); n > 0 && (segs[n-1].Off+segs[n-1].Len == off || n == maxSegments) {
		segs[n-1].Len = end - segs[n-1].Off
		return segs
	}
	return append(segs, Segment{off, end - off})
}

// Scan reads the size bytes of r through buf (a multiple of BlockSize)
// and returns its data: every run of blocks not all zeros.
func Scan(r io.ReaderAt, size int64, buf []byte) ([]Segment, error) {
	var segs []Segment
	for off := int64(0); off < size; {
		n, err := r.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if n == 0 && err == nil {
			err = io.ErrUnexpectedEOF
		}
		for i := 0; i < n; i += BlockSize {
			if blk := buf[i:min(i+BlockSize, n)]; !allZero(blk) {
				segs = addData(segs, off+int64(i), off+int64(i+len(blk)))
			}
		}
		off += int64(n)
		if err != nil && !(errors.Is(err, io.EOF) && off == size) {
			return nil, err
		}
	}
	return segs, nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// File is what WriteHoles writes to: a new, empty file.
type File interface {
	WriteAt(p []byte, off int64) (int, error)
	Truncate(size int64) error
}

// WriteHoles writes the content r reads to f, leaving each block of
// zeros a hole, and returns its length. Errors are f's, or r's wrapped in
// a *ReadError.
func WriteHoles(f File, r io.Reader, buf []byte) (int64, error) {
	var off, written int64 // written: the end of what was written
	for {
		n, rerr := readFull(r, buf)
		for i := 0; i < n; {
			// A run of data blocks goes in one write.
			j := i
			for j < n && !allZero(buf[j:min(j+BlockSize, n)]) {
				j = min(j+BlockSize, n)
			}
			if j > i {
				if _, err := f.WriteAt(buf[i:j], off+int64(i)); err != nil {
					return off + int64(i), err
				}
				written = off + int64(j)
				i = j
			} else {
				i = min(i+BlockSize, n)
			}
		}
		off += int64(n)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return off, &ReadError{rerr}
		}
	}
	if off > written {
		if err := f.Truncate(off); err != nil {
			return off, err
		}
	}
	return off, nil
}

// readFull fills buf from r as far as it goes; io.EOF says r ended.
func readFull(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// ReadError is WriteHoles's error reading its content.
type ReadError struct{ Err error }

func (e *ReadError) Error() string { return e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }
