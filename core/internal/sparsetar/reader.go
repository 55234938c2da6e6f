package sparsetar

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// maxHeaders bounds the header blocks Reader keeps for one entry: its PAX
// and GNU long-name headers (archive/tar allows 1 MiB each), its own
// header and its sparse map (1 MiB at most in archive/tar too).
const maxHeaders = 6 << 20

// Reader reads a tar stream as tar.Reader does, and also hands a sparse
// entry over as it is stored: its map (Sparse) and its data's bytes
// (ReadData), so that its holes cost nothing. tar.Reader reads the holes
// as zeros and keeps the map to itself, which makes a small entry that
// claims a terabyte of holes cost a terabyte of zeros.
//
// The map is parsed from the header blocks tar.Reader read in Next, which
// the stream under it records; the data is read from the stream directly,
// and tar.Reader, which then skips what it thinks is left of the entry,
// is handed zeros for it in place of the stream.
type Reader struct {
	tr  *tar.Reader
	tap tap

	// The current entry, if sparse.
	sparse bool
	data   []Segment
	size   int64 // its length, holes included
	left   int64 // its stored data not read yet
	pos    int64 // where Read is in its content
	seg    int   // Read's segment in data
}

// NewReader returns a Reader reading the tar stream r.
func NewReader(r io.Reader) *Reader {
	sr := &Reader{tap: tap{r: r, recFrom: -1}}
	sr.tr = tar.NewReader(&sr.tap)
	return sr
}

// MapError reports a sparse entry whose map is malformed.
type MapError struct {
	Name   string // the entry's name
	Reason string
}

func (e *MapError) Error() string {
	return fmt.Sprintf("entry %q: its sparse map %s", e.Name, e.Reason)
}

// Next advances to the next entry, as tar.Reader.Next does. A malformed
// sparse map is a *MapError.
func (r *Reader) Next() (*tar.Header, error) {
	if err := r.skip(); err != nil {
		return nil, err
	}
	r.sparse, r.data, r.size, r.left, r.pos, r.seg = false, nil, 0, 0, 0, 0
	// Every header starts on a block: the entry's own data and padding
	// come before it.
	r.tap.record(roundUp(r.tap.consumed))
	hdr, err := r.tr.Next()
	rec, over := r.tap.stop()
	if err != nil {
		if err != io.EOF && !over {
			if merr := diagnose(rec); merr != nil {
				return nil, merr
			}
		}
		return nil, err
	}
	kind := sparseKind(hdr.Typeflag, hdr.PAXRecords)
	if kind == notSparse {
		return hdr, nil
	}
	if over {
		return nil, &MapError{Name: hdr.Name, Reason: fmt.Sprintf("and the headers before it are over %d MiB long", maxHeaders>>20)}
	}
	data, left, reason := readMap(kind, rec, hdr.PAXRecords, hdr.Size)
	if reason != "" {
		return nil, &MapError{Name: hdr.Name, Reason: reason}
	}
	r.sparse, r.data, r.size, r.left = true, data, hdr.Size, left
	return hdr, nil
}

// skip reads what is left of the current entry: a sparse entry's data
// straight from the stream, so that tar.Reader skips it as zeros.
func (r *Reader) skip() error {
	if !r.sparse {
		_, err := io.Copy(io.Discard, r.tr)
		return err
	}
	_, err := io.Copy(io.Discard, dataReader{r})
	return err
}

// Sparse returns the current entry's map, if it is a sparse file: its
// data segments, in order, the rest holes.
func (r *Reader) Sparse() ([]Segment, bool) { return r.data, r.sparse }

// Read reads the current entry's content, as tar.Reader.Read does: a
// sparse entry's holes read as zeros. A sparse entry is read either
// through Read or through ReadData, not both.
func (r *Reader) Read(p []byte) (int, error) {
	if !r.sparse {
		return r.tr.Read(p)
	}
	if r.pos >= r.size {
		return 0, io.EOF
	}
	for r.seg < len(r.data) && r.data[r.seg].Off+r.data[r.seg].Len <= r.pos {
		r.seg++
	}
	if r.seg == len(r.data) || r.pos < r.data[r.seg].Off {
		end := r.size
		if r.seg < len(r.data) {
			end = r.data[r.seg].Off
		}
		n := int(min(int64(len(p)), end-r.pos))
		clear(p[:n])
		r.pos += int64(n)
		return n, nil
	}
	s := r.data[r.seg]
	n, err := r.ReadData(p[:min(int64(len(p)), s.Off+s.Len-r.pos)])
	r.pos += int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// ReadData reads the current sparse entry's data: its segments' bytes one
// after the other, io.EOF after the last.
func (r *Reader) ReadData(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.tap.readDirect(p)
	r.left -= int64(n)
	if err == io.EOF && r.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// dataReader is ReadData as an io.Reader.
type dataReader struct{ r *Reader }

func (d dataReader) Read(p []byte) (int, error) { return d.r.ReadData(p) }

// tap is the stream under tar.Reader. It records the blocks read from
// recFrom on, and owes tar.Reader the bytes read past it (credit), which it
// hands over as zeros.
type tap struct {
	r        io.Reader
	consumed int64 // bytes read from r
	credit   int64
	recFrom  int64 // -1: not recording
	rec      []byte
	over     bool // rec would have grown past maxHeaders
}

func (t *tap) Read(p []byte) (int, error) {
	if t.credit > 0 {
		n := int(min(int64(len(p)), t.credit))
		clear(p[:n])
		t.credit -= int64(n)
		return n, nil
	}
	n, err := t.r.Read(p)
	if t.recFrom >= 0 && !t.over {
		if skip := t.recFrom - t.consumed; skip < int64(n) {
			b := p[max(skip, 0):n]
			if len(t.rec)+len(b) > maxHeaders {
				t.over = true
			} else {
				t.rec = append(t.rec, b...)
			}
		}
	}
	t.consumed += int64(n)
	return n, err
}

// readDirect reads p from the stream on tar.Reader's behalf.
func (t *tap) readDirect(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.consumed += int64(n)
	t.credit += int64(n)
	return n, err
}

func (t *tap) record(from int64) { t.recFrom, t.rec, t.over = from, t.rec[:0], false }

func (t *tap) stop() ([]byte, bool) {
	t.recFrom = -1
	return t.rec, t.over
}

func roundUp(n int64) int64 { return (n + 511) &^ 511 }

// The ways GNU tar stores a sparse file.
type kind int

const (
	notSparse kind = iota
	oldGNU         // type 'S', the map in the header and extension blocks
	pax0           // PAX 0.0 and 0.1, the map in PAX records
	pax1           // PAX 1.0, the map at the start of the entry's data
)

// sparseKind tells how the entry is stored, as archive/tar decides it: an
// unknown PAX version is an ordinary file.
func sparseKind(typeflag byte, pax map[string]string) kind {
	if typeflag == tar.TypeGNUSparse {
		return oldGNU
	}
	major, minor := pax["GNU.sparse.major"], pax["GNU.sparse.minor"]
	switch {
	case major == "0" && (minor == "0" || minor == "1"):
		return pax0
	case major == "1" && minor == "0":
		return pax1
	case major != "" || minor != "":
		return notSparse
	case pax["GNU.sparse.map"] != "":
		return pax0
	}
	return notSparse
}

// headers is what the blocks before an entry's data say.
type headers struct {
	pax      map[string]string
	longName string
	main     []byte // the entry's own header block
	rest     []byte // the blocks after it
}

// splitHeaders walks the header blocks rec holds: PAX and GNU long-name
// headers, then the entry's own. ok is false if rec ends before it.
func splitHeaders(rec []byte) (h headers, ok bool) {
	for len(rec) >= 512 {
		blk := rec[:512]
		switch blk[156] {
		case tar.TypeXHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
			size, err := parseNumeric(blk[124:136])
			if err != nil || size < 0 || size > int64(len(rec)-512) {
				return h, false
			}
			body := rec[512 : 512+size]
			if blk[156] == tar.TypeXHeader {
				h.pax = parsePAX(body)
			} else if blk[156] == tar.TypeGNULongName {
				h.longName, _, _ = strings.Cut(string(body), "\x00")
			}
			rec = rec[min(512+roundUp(size), int64(len(rec))):]
		default:
			h.main, h.rest = blk, rec[512:]
			return h, true
		}
	}
	return h, false
}

// readMap reads a sparse entry's map from its header blocks rec (and, for
// PAX 0.x, its PAX records) and checks it against the entry's size. It
// returns the map and the bytes of data that follow, or why the map is
// malformed.
func readMap(k kind, rec []byte, pax map[string]string, size int64) (_ []Segment, left int64, reason string) {
	h, ok := splitHeaders(rec)
	if !ok {
		return nil, 0, "could not be found in the headers archive/tar read"
	}
	stored, err := parseNumeric(h.main[124:136])
	if s, ok := pax["size"]; ok {
		stored, err = strconv.ParseInt(s, 10, 64)
	}
	if err != nil || stored < 0 {
		return nil, 0, "belongs to an entry of no valid size"
	}
	var data []Segment
	switch k {
	case oldGNU:
		if data, reason = oldGNUMap(h.main, h.rest); reason != "" {
			return nil, 0, reason
		}
	case pax0:
		if len(h.rest) != 0 {
			return nil, 0, "was not read as archive/tar reads it"
		}
		if data, reason = paxMap(pax); reason != "" {
			return nil, 0, reason
		}
	case pax1:
		var used int64
		if data, used, reason = textMap(h.rest); reason != "" {
			return nil, 0, reason
		}
		switch {
		case used > int64(len(h.rest)):
			return nil, 0, "is cut short"
		case used < int64(len(h.rest)):
			return nil, 0, "was not read as archive/tar reads it"
		}
		if stored -= used; stored < 0 {
			return nil, 0, "is longer than the entry"
		}
	}
	return data, stored, check(data, size, stored)
}

// check validates a map: segments in order, apart, within size, holding
// stored bytes in all.
func check(data []Segment, size, stored int64) string {
	var end, sum int64
	for i, s := range data {
		switch {
		case s.Off < 0 || s.Len < 0:
			return fmt.Sprintf("has segment %d at offset %d of length %d: negative", i+1, s.Off, s.Len)
		case s.Off > size || s.Len > size-s.Off:
			return fmt.Sprintf("has segment %d (offset %d, %d bytes) ending past the file's length, %d", i+1, s.Off, s.Len, size)
		case s.Off < end:
			return fmt.Sprintf("has segment %d (offset %d, %d bytes) overlapping the one before, or out of order", i+1, s.Off, s.Len)
		}
		end, sum = s.Off+s.Len, sum+s.Len
	}
	if sum != stored {
		return fmt.Sprintf("places %d bytes of data but the entry stores %d", sum, stored)
	}
	return ""
}

// oldGNUMap reads the map of a type 'S' entry from its header block and
// the extension blocks after it.
func oldGNUMap(main, ext []byte) ([]Segment, string) {
	if !bytes.Equal(main[257:265], []byte("ustar  \x00")) {
		return nil, "is in a type 'S' entry that is not in GNU format"
	}
	var data []Segment
	entries, extended := main[386:482], main[482]
	for {
		for e := entries; len(e) >= 24 && e[0] != 0; e = e[24:] {
			off, err1 := parseNumeric(e[:12])
			n, err2 := parseNumeric(e[12:24])
			if err1 != nil || err2 != nil {
				return nil, "has a segment that is not a number"
			}
			data = append(data, Segment{off, n})
		}
		if extended == 0 {
			break
		}
		if len(ext) < 512 {
			return nil, "is cut short"
		}
		entries, extended, ext = ext[:504], ext[504], ext[512:]
	}
	if len(ext) != 0 {
		return nil, "was not read as archive/tar reads it"
	}
	return data, ""
}

// paxMap reads a PAX 0.0 or 0.1 map: archive/tar gathers 0.0's records
// into GNU.sparse.map as 0.1 has them.
func paxMap(pax map[string]string) ([]Segment, string) {
	n, err := strconv.ParseInt(pax["GNU.sparse.numblocks"], 10, 64)
	if err != nil || n < 0 {
		return nil, fmt.Sprintf("has GNU.sparse.numblocks %q, not a count", pax["GNU.sparse.numblocks"])
	}
	var fields []string
	if m := pax["GNU.sparse.map"]; m != "" {
		fields = strings.Split(m, ",")
	}
	if int64(len(fields)) != 2*n {
		return nil, fmt.Sprintf("has %d numbers where GNU.sparse.numblocks (%d) asks for %d", len(fields), n, 2*n)
	}
	return pairs(fields)
}

// textMap reads a PAX 1.0 map, decimal numbers a line each (a count, then
// offset and length pairs), from b, and returns how many blocks of b it
// takes.
func textMap(b []byte) ([]Segment, int64, string) {
	lines := func(n int) ([]string, int, bool) {
		var out []string
		pos := 0
		for len(out) < n {
			i := bytes.IndexByte(b[pos:], '\n')
			if i < 0 {
				return nil, 0, false
			}
			out = append(out, string(b[pos:pos+i]))
			pos += i + 1
		}
		return out, pos, true
	}
	first, _, ok := lines(1)
	if !ok {
		return nil, 0, "is cut short"
	}
	n, err := strconv.ParseInt(first[0], 10, 64)
	if err != nil || n < 0 || n > int64(len(b)) {
		return nil, 0, fmt.Sprintf("starts with %q, not a count", first[0])
	}
	all, end, ok := lines(1 + 2*int(n))
	if !ok {
		return nil, 0, "is cut short"
	}
	data, reason := pairs(all[1:])
	return data, roundUp(int64(end)), reason
}

func pairs(fields []string) ([]Segment, string) {
	data := make([]Segment, 0, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		off, err1 := strconv.ParseInt(fields[i], 10, 64)
		n, err2 := strconv.ParseInt(fields[i+1], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Sprintf("has segment %d, %q and %q, not numbers", i/2+1, fields[i], fields[i+1])
		}
		data = append(data, Segment{off, n})
	}
	return data, ""
}

// diagnose looks at the headers of an entry archive/tar refused: if it is
// a sparse file whose map is malformed, it says how, naming the entry.
func diagnose(rec []byte) *MapError {
	h, ok := splitHeaders(rec)
	if !ok {
		return nil
	}
	if h.pax == nil {
		h.pax = map[string]string{}
	}
	k := sparseKind(h.main[156], h.pax)
	if k == notSparse {
		return nil
	}
	name := h.longName
	for _, key := range []string{"path", "GNU.sparse.name"} {
		if v := h.pax[key]; v != "" {
			name = v
		}
	}
	if name == "" {
		name, _, _ = strings.Cut(string(h.main[:100]), "\x00")
	}
	// The file's length as archive/tar takes it: from the sparse
	// records if there are any, else the entry's own size.
	size, err := parseNumeric(h.main[124:136])
	if s, ok := h.pax["size"]; ok {
		size, err = strconv.ParseInt(s, 10, 64)
	}
	switch {
	case k == oldGNU:
		size, err = parseNumeric(h.main[483:495])
	case h.pax["GNU.sparse.size"] != "":
		size, err = strconv.ParseInt(h.pax["GNU.sparse.size"], 10, 64)
	case h.pax["GNU.sparse.realsize"] != "":
		size, err = strconv.ParseInt(h.pax["GNU.sparse.realsize"], 10, 64)
	}
	if err != nil {
		return &MapError{Name: name, Reason: "belongs to an entry of no valid length"}
	}
	if _, _, reason := readMap(k, rec, h.pax, size); reason != "" {
		return &MapError{Name: name, Reason: reason}
	}
	return nil
}

// parsePAX reads PAX records ("LEN KEY=VALUE\n"), gathering PAX 0.0's
// repeated offset and numbytes records into GNU.sparse.map as archive/tar
// does. It stops at the first malformed record.
func parsePAX(b []byte) map[string]string {
	recs := map[string]string{}
	var sparse []string
	for len(b) > 0 {
		sp := bytes.IndexByte(b, ' ')
		if sp < 0 {
			break
		}
		n, err := strconv.Atoi(string(b[:sp]))
		if err != nil || n <= sp || n > len(b) || b[n-1] != '\n' {
			break
		}
		k, v, ok := strings.Cut(string(b[sp+1:n-1]), "=")
		if !ok {
			break
		}
		b = b[n:]
		if k == "GNU.sparse.offset" || k == "GNU.sparse.numbytes" {
			sparse = append(sparse, v)
			continue
		}
		recs[k] = v
	}
	if len(sparse) > 0 {
		recs["GNU.sparse.map"] = strings.Join(sparse, ",")
	}
	return recs
}

// parseNumeric reads a tar number field: octal, or base-256 if its first
// byte has the top bit set.
func parseNumeric(b []byte) (int64, error) {
	if len(b) > 0 && b[0]&0x80 != 0 {
		if b[0] != 0x80 {
			return 0, errors.New("a negative or oversized base-256 number")
		}
		var v uint64
		for _, c := range b[1:] {
			if v > math.MaxInt64>>8 {
				return 0, errors.New("a base-256 number past 2^63")
			}
			v = v<<8 | uint64(c)
		}
		return int64(v), nil
	}
	s := strings.Trim(string(b), " \x00")
	if s == "" {
		return 0, nil
	}
	return strconv.ParseInt(s, 8, 64)
}
