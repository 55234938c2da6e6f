package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/fstree"
	"z.gfire.dev/gvx/core/internal/sparsetar"
)

// OCI whiteout names (image-spec layer.md).
const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	whiteoutOpaque = ".wh..wh..opq"
	paxXattrPrefix = "SCHILY.xattr."
	maxNameLen     = 255
)

// DataSink stores regular files' content as the layers stream by. It
// returns a handle that ends up in fstree.Node.Data. core/erofs.Writer
// implements it.
type DataSink interface {
	AddFile(r io.Reader, size int64) (uint64, error)
}

// SparseSink is a DataSink that stores a sparse file's holes as holes:
// AddSparseFile's r reads only the bytes of data, the file's segments in
// order. A sink without it is given the holes as zeros, which for a small
// entry claiming a terabyte of holes is a terabyte to read.
// core/erofs.Writer implements it.
type SparseSink interface {
	AddSparseFile(r io.Reader, size int64, data []sparsetar.Segment) (uint64, error)
}

// LayerError reports a layer entry that cannot be applied.
type LayerError struct {
	Layer  int    // 1-based, bottom layer first
	Entry  string // the entry's name as the tar has it
	Reason string
}

func (e *LayerError) Error() string {
	return fmt.Sprintf("layer %d, entry %s: %s; %s", e.Layer, quoteEntry(e.Entry), e.Reason, layerAdvice)
}

// layerAdvice ends every error about a layer's content: whether the layer
// was written wrong, damaged on the way or made to attack, the remedy is
// another copy of the image.
const layerAdvice = "the layer is malformed, damaged or hostile: rebuild the image, or get it again from where it came from"

// maxQuotedEntry bounds how much of an entry's name an error quotes: a
// name may be as long as a PAX header, which is far longer than any
// terminal line.
const maxQuotedEntry = 256

// quoteEntry quotes a tar entry's name for an error, cut short with its
// length if it is long.
func quoteEntry(name string) string {
	if len(name) <= maxQuotedEntry {
		return strconv.Quote(name)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(name[:maxQuotedEntry]), len(name))
}

// FlattenStats counts what the layers contained.
type FlattenStats struct {
	Entries   int // tar entries read
	Whiteouts int // whiteout and opaque markers applied
	// XattrFiles is how many inodes of the final tree carry xattrs.
	XattrFiles int
	// GzipInflater is what inflated the gzip layers, "igzip" or "go"; empty
	// if no layer was gzip. Set by Flatten.
	GzipInflater string
}

// dirent names one entry of a directory.
type dirent struct {
	parent *fstree.Node
	name   string
}

// Flattener applies layers, bottom first, to one tree with the semantics of
// extracting them in order onto a fresh directory, except that nothing
// touches the host filesystem and symlinks are never followed: an entry
// that would be written through a symlink is refused.
type Flattener struct {
	root  *fstree.Node
	sink  DataSink
	layer int
	// touched holds the entries the current layer created, replaced or
	// passed through: whiteouts and opaque markers hide only what lower
	// layers put there (image-spec: "whiteout files MUST only apply to
	// resources in lower/parent layers").
	touched map[dirent]bool
	stats   FlattenStats
}

// NewFlattener returns a flattener with an empty root (0755, root-owned,
// time zero) that stores content in sink.
func NewFlattener(sink DataSink) *Flattener {
	return &Flattener{root: fstree.NewDir(0o755), sink: sink}
}

// Root returns the tree built so far.
func (f *Flattener) Root() *fstree.Node { return f.root }

// Stats returns the counts so far; XattrFiles is computed on the final tree.
func (f *Flattener) Stats() FlattenStats {
	s := f.stats
	seen := make(map[*fstree.Node]bool)
	fstree.Walk(f.root, func(_ string, n *fstree.Node) error {
		if len(n.Xattrs) > 0 && !seen[n] {
			seen[n] = true
			s.XattrFiles++
		}
		return nil
	})
	return s
}

// ApplyLayer reads one uncompressed layer tar and applies it on top of the
// tree.
func (f *Flattener) ApplyLayer(r io.Reader) error {
	return f.ApplyLayerContext(context.Background(), r)
}

// ApplyLayerContext is ApplyLayer, ending with ctx's error once ctx is
// done. Checking the stream is not enough: a sparse entry's holes cost no
// reads from it, and one small entry may claim terabytes of them.
func (f *Flattener) ApplyLayerContext(ctx context.Context, r io.Reader) error {
	f.layer++
	f.touched = make(map[dirent]bool)
	tr := &cancellableTar{ctx: ctx, r: sparsetar.NewReader(cancellableReader{ctx, r})}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if merr := (*sparsetar.MapError)(nil); errors.As(err, &merr) {
			return &LayerError{Layer: f.layer, Entry: merr.Name, Reason: fmt.Sprintf("its sparse map %s", merr.Reason)}
		}
		if err != nil {
			return fmt.Errorf("layer %d: reading the tar stream after %d entries: %w (the layer is truncated or corrupt: get the image again from where it came from, or rebuild it)", f.layer, f.stats.Entries, err)
		}
		f.stats.Entries++
		if err := f.apply(hdr, tr); err != nil {
			var le *LayerError
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			if errors.As(err, &le) {
				return err
			}
			return &LayerError{Layer: f.layer, Entry: hdr.Name, Reason: err.Error()}
		}
	}
}

// cancellableTar reads a tar's entries until its context is done.
type cancellableTar struct {
	ctx context.Context
	r   *sparsetar.Reader
}

func (c *cancellableTar) Next() (*tar.Header, error) { return c.r.Next() }

func (c *cancellableTar) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

// data is the current sparse entry's data, and its map.
func (c *cancellableTar) data() (io.Reader, []sparsetar.Segment, bool) {
	segs, ok := c.r.Sparse()
	return cancellableReader{c.ctx, readerFunc(c.r.ReadData)}, segs, ok
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }

// cancellableReader reads r until ctx is done.
type cancellableReader struct {
	ctx context.Context
	r   io.Reader
}

func (c cancellableReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

func (f *Flattener) fail(hdr *tar.Header, format string, args ...any) error {
	return &LayerError{Layer: f.layer, Entry: hdr.Name, Reason: fmt.Sprintf(format, args...)}
}

// cleanPath splits a tar entry name into components. Leading "/" and "./"
// are dropped (layers are relative to the root); ".." is refused outright,
// even where it would stay inside the tree.
func cleanPath(name string) ([]string, error) {
	var parts []string
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			return nil, errors.New(`the path has a ".." component; layers must not reach outside the root`)
		}
		if len(c) > maxNameLen {
			return nil, fmt.Errorf("a path component is %d bytes long; the limit is %d", len(c), maxNameLen)
		}
		if strings.IndexByte(c, 0) >= 0 {
			return nil, errors.New("the path contains a NUL byte")
		}
		parts = append(parts, c)
	}
	return parts, nil
}

func (f *Flattener) apply(hdr *tar.Header, content *cancellableTar) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	parts, err := cleanPath(hdr.Name)
	if err != nil {
		return f.fail(hdr, "%v", err)
	}
	if len(parts) == 0 {
		// "./": the root directory's own metadata.
		if hdr.Typeflag != tar.TypeDir {
			return f.fail(hdr, "the root of a layer must be a directory, not type %q", hdr.Typeflag)
		}
		return f.setDirMeta(hdr, f.root)
	}
	name := parts[len(parts)-1]
	if strings.HasPrefix(name, whiteoutPrefix) {
		return f.whiteout(hdr, parts[:len(parts)-1], name)
	}
	parent, err := f.mkdirAll(hdr, parts[:len(parts)-1])
	if err != nil {
		return err
	}
	key := dirent{parent, name}
	f.touched[key] = true
	existing := parent.Children[name]

	if hdr.Typeflag == tar.TypeLink {
		target, err := f.linkTarget(hdr)
		if err != nil {
			return err
		}
		if target != existing {
			parent.Children[name] = target
		}
		return setXattrs(hdr, target)
	}

	n, err := f.newNode(hdr)
	if err != nil {
		return err
	}
	if n.IsDir() {
		if existing != nil && existing.IsDir() {
			// A directory entry over a directory updates its metadata
			// and keeps what lower layers put inside.
			return f.setDirMeta(hdr, existing)
		}
		parent.Children[name] = n
		return f.setDirMeta(hdr, n)
	}
	if n.Type() == fstree.TypeRegular {
		if err = f.addFile(n, content); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return f.fail(hdr, "reading its content: %v (the layer is truncated or corrupt)", err)
			}
			return f.fail(hdr, "storing its content: %v", err)
		}
	}
	parent.Children[name] = n
	return nil
}

// addFile stores a regular file's content: a sparse entry's holes as
// holes, if the sink can.
func (f *Flattener) addFile(n *fstree.Node, content *cancellableTar) (err error) {
	r, segs, sparse := content.data()
	if ss, ok := f.sink.(SparseSink); ok && sparse {
		n.Data, err = ss.AddSparseFile(r, n.Size, segs)
		return err
	}
	n.Data, err = f.sink.AddFile(content, n.Size)
	return err
}

// newNode builds the node a non-link header describes.
func (f *Flattener) newNode(hdr *tar.Header) (*fstree.Node, error) {
	n := &fstree.Node{}
	var typ uint32
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeCont, tar.TypeGNUSparse:
		typ = fstree.TypeRegular
		if hdr.Size < 0 {
			return nil, f.fail(hdr, "negative size %d", hdr.Size)
		}
		n.Size = hdr.Size
	case tar.TypeDir:
		typ = fstree.TypeDir
		n.Children = make(map[string]*fstree.Node)
	case tar.TypeSymlink:
		typ = fstree.TypeSymlink
		if hdr.Linkname == "" {
			return nil, f.fail(hdr, "symlink with an empty target")
		}
		if len(hdr.Linkname) >= 4096 {
			return nil, f.fail(hdr, "symlink target is %d bytes long; the limit is 4095", len(hdr.Linkname))
		}
		n.Target = hdr.Linkname
	case tar.TypeChar, tar.TypeBlock:
		typ = fstree.TypeChar
		if hdr.Typeflag == tar.TypeBlock {
			typ = fstree.TypeBlock
		}
		if hdr.Devmajor < 0 || hdr.Devminor < 0 || hdr.Devmajor > math.MaxUint32 || hdr.Devminor > math.MaxUint32 {
			return nil, f.fail(hdr, "invalid device number %d:%d", hdr.Devmajor, hdr.Devminor)
		}
		n.Rdev = unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
	case tar.TypeFifo:
		typ = fstree.TypeFIFO
	default:
		return nil, f.fail(hdr, "unsupported tar entry type %q", hdr.Typeflag)
	}
	if err := f.setMeta(hdr, n, typ); err != nil {
		return nil, err
	}
	return n, nil
}

func (f *Flattener) setMeta(hdr *tar.Header, n *fstree.Node, typ uint32) error {
	if hdr.Uid < 0 || hdr.Uid > math.MaxUint32 || hdr.Gid < 0 || hdr.Gid > math.MaxUint32 {
		return f.fail(hdr, "owner %d:%d is outside 0..%d", hdr.Uid, hdr.Gid, uint32(math.MaxUint32))
	}
	n.Mode = typ | uint32(hdr.Mode)&fstree.PermMask
	n.UID, n.GID = uint32(hdr.Uid), uint32(hdr.Gid)
	n.Mtime = fstree.Timespec{Sec: hdr.ModTime.Unix(), Nsec: uint32(hdr.ModTime.Nanosecond())}
	return setXattrs(hdr, n)
}

func (f *Flattener) setDirMeta(hdr *tar.Header, d *fstree.Node) error {
	return f.setMeta(hdr, d, fstree.TypeDir)
}

// setXattrs replaces n's xattrs with the header's, if it has any.
func setXattrs(hdr *tar.Header, n *fstree.Node) error {
	var x map[string]string
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, paxXattrPrefix); ok {
			if x == nil {
				x = make(map[string]string)
			}
			x[name] = v
		}
	}
	if x != nil || hdr.Typeflag != tar.TypeLink {
		n.Xattrs = x
	}
	return nil
}

// mkdirAll walks parts from the root, creating missing directories as
// extraction would (0755, root-owned, time zero), and returns the last one.
// A component that exists but is not a directory is refused: a symlink
// would make the entry land outside where it claims, anything else makes
// the layer inconsistent.
func (f *Flattener) mkdirAll(hdr *tar.Header, parts []string) (*fstree.Node, error) {
	d := f.root
	for i, name := range parts {
		c := d.Children[name]
		switch {
		case c == nil:
			c = fstree.NewDir(0o755)
			d.Children[name] = c
		case c.Type() == fstree.TypeSymlink:
			return nil, f.fail(hdr, "its parent %q is a symlink (to %q); a layer may not write through a symlink", strings.Join(parts[:i+1], "/"), c.Target)
		case !c.IsDir():
			return nil, f.fail(hdr, "its parent %q is a %s, not a directory", strings.Join(parts[:i+1], "/"), fstree.TypeName(c.Mode))
		}
		// The directory exists in this layer too (it holds this entry).
		f.touched[dirent{d, name}] = true
		d = c
	}
	return d, nil
}

// linkTarget resolves a hard link's target in the tree built so far,
// without following symlinks.
func (f *Flattener) linkTarget(hdr *tar.Header) (*fstree.Node, error) {
	parts, err := cleanPath(hdr.Linkname)
	if err != nil {
		return nil, f.fail(hdr, "hard link target %q: %v", hdr.Linkname, err)
	}
	if len(parts) == 0 {
		return nil, f.fail(hdr, "hard link to the root directory")
	}
	n := f.root
	for i, name := range parts {
		if n.Type() == fstree.TypeSymlink {
			return nil, f.fail(hdr, "hard link target %q goes through symlink %q; links may not resolve through symlinks", hdr.Linkname, strings.Join(parts[:i], "/"))
		}
		if !n.IsDir() {
			return nil, f.fail(hdr, "hard link target %q: %q is not a directory", hdr.Linkname, strings.Join(parts[:i], "/"))
		}
		if n = n.Children[name]; n == nil {
			return nil, f.fail(hdr, "hard link target %q does not exist in this or a lower layer", hdr.Linkname)
		}
	}
	if n.IsDir() {
		return nil, f.fail(hdr, "hard link target %q is a directory", hdr.Linkname)
	}
	return n, nil
}

// whiteout applies ".wh.NAME" (delete NAME from lower layers) and
// ".wh..wh..opq" (hide the directory's lower contents).
func (f *Flattener) whiteout(hdr *tar.Header, dirParts []string, name string) error {
	// Find the directory without creating it: a whiteout in a directory
	// no lower layer has deletes nothing.
	d := f.root
	for i, c := range dirParts {
		next := d.Children[c]
		if next == nil {
			return nil
		}
		if next.Type() == fstree.TypeSymlink {
			return f.fail(hdr, "whiteout inside %q, which is a symlink; a layer may not delete through a symlink", strings.Join(dirParts[:i+1], "/"))
		}
		if !next.IsDir() {
			return nil
		}
		d = next
	}
	f.stats.Whiteouts++
	if name == whiteoutOpaque {
		f.hideLower(d)
		return nil
	}
	if strings.HasPrefix(name, whiteoutMeta) {
		// Other AUFS metadata (.wh..wh.plnk, .wh..wh.aufs): not content.
		f.stats.Whiteouts--
		return nil
	}
	target := name[len(whiteoutPrefix):]
	if target == "" || target == "." || target == ".." {
		return f.fail(hdr, "whiteout of %q is not a valid name", target)
	}
	c := d.Children[target]
	switch {
	case c == nil:
	case f.touched[dirent{d, target}]:
		// This layer made it; only what lower layers put below it goes.
		if c.IsDir() {
			f.hideLower(c)
		}
	default:
		delete(d.Children, target)
	}
	return nil
}

// hideLower removes everything below d that the current layer did not put
// there.
func (f *Flattener) hideLower(d *fstree.Node) {
	for name, c := range d.Children {
		switch {
		case !f.touched[dirent{d, name}]:
			delete(d.Children, name)
		case c.IsDir():
			f.hideLower(c)
		}
	}
}
