package sentry

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/abi/linux"
	gcontext "gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sentry/checkpoint"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/host"
	"gvisor.dev/gvisor/pkg/sentry/inet"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/pkg/sentry/pgalloc"
	"gvisor.dev/gvisor/pkg/sentry/socket/netfilter"
	"gvisor.dev/gvisor/pkg/sentry/socket/netstack"
	sentrytime "gvisor.dev/gvisor/pkg/sentry/time"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"z.gfire.dev/gvx/core/sentry/ext4fs"
)

// A snapshot is a running sandbox written down: its kernel, every guest
// process with its memory, and the writable layer of its root filesystem.
// Restore makes a running sandbox of it again, in a new process, in the
// time it takes to read it instead of the time its programs took to start
// (a ready dockerd: its iptables set-up alone is a second here).
//
// The stream is a header, then gVisor's state encoding of the kernel and
// its memory:
//
//	"GVXSNAP\n"  8 bytes
//	length       uint32, big-endian
//	metadata     JSON (snapshotMeta), length bytes
//	kernel       kernel.Kernel.SaveTo's stream
//	"GVXSUM32"   8 bytes
//	checksum     uint32, big-endian: CRC-32C of everything before "GVXSUM32"
//
// gVisor's decoder trusts its input: a snapshot damaged on disk or cut
// short may fail deep inside it with a message about its own types, or,
// worse, decode and run a guest whose memory is not what was saved. So
// Restore checks the checksum before it decodes anything. CRC-32C finds
// accidental damage at a small fraction of a restore's time; it is no
// protection against someone who can write the file, who could fix the
// checksum up, so a snapshot is as trusted as the file it is in.

// snapshotMagic opens every snapshot.
const snapshotMagic = "GVXSNAP\n"

// snapshotVersion changes with the header's format. gVisor's encoding
// after it is tied to the exact build (see executableBuildID), which the
// metadata records.
const snapshotVersion = 2

// snapshotSumMagic opens the trailer that carries the snapshot's checksum.
const snapshotSumMagic = "GVXSUM32"

// snapshotTrailerLength is the trailer's length: its magic and the CRC.
const snapshotTrailerLength = len(snapshotSumMagic) + 4

// castagnoli is CRC-32C's table, which Go computes with the CPU's crc32
// instruction.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maxSnapshotMeta bounds the metadata read before it is trusted.
const maxSnapshotMeta = 1 << 20

// snapshotMeta is what Restore checks before it decodes the kernel.
type snapshotMeta struct {
	Version int `json:"version"`
	// Build identifies the executable that wrote the snapshot; only the
	// same build decodes it.
	Build string `json:"build"`
	// Image fingerprints the root filesystem image: a snapshot refers to
	// the image's blocks and restores only onto the same image.
	Image imageFingerprint `json:"image"`
	// NFTables is process-wide in gVisor and must be set before the
	// kernel is decoded.
	NFTables bool `json:"nftables"`
	// InitStreams are init's standard descriptors that are host files,
	// which Restore binds to the new process's streams.
	InitStreams []int `json:"init_streams,omitempty"`
	// Annotations are the caller's (CheckpointOptions.Annotations).
	Annotations map[string]string `json:"annotations,omitempty"`
}

// imageFingerprint identifies an EROFS image cheaply: its size and a hash
// of its first block, which holds the superblock (with the build's time
// and the root's inode), the part gVisor's erofs itself compares when it
// restores a filesystem. Every boot computes it (New), so it reads one
// block.
type imageFingerprint struct {
	Size   int64  `json:"size"`
	Sha256 string `json:"sha256_head"`
}

// fingerprintLength is how much of the image the fingerprint hashes.
const fingerprintLength = 4 << 10

func fingerprintImage(f *os.File) (imageFingerprint, error) {
	st, err := f.Stat()
	if err != nil {
		return imageFingerprint{}, err
	}
	var head [fingerprintLength]byte
	n, err := f.ReadAt(head[:], 0)
	if err != nil && err != io.EOF {
		return imageFingerprint{}, fmt.Errorf("sentry: reading the image: %w", err)
	}
	sum := sha256.Sum256(head[:n])
	return imageFingerprint{Size: st.Size(), Sha256: hex.EncodeToString(sum[:])}, nil
}

// Errors of Checkpoint and Restore.
var (
	// ErrNotSnapshot is returned by Restore for a stream that is not a
	// snapshot of this gvx.
	ErrNotSnapshot = errors.New("sentry: not a gvx sandbox snapshot")
	// ErrSnapshotImage is returned by Restore when Config.Image is not
	// the image the snapshot was taken on.
	ErrSnapshotImage = errors.New("sentry: the snapshot was taken on another root image; restore it with the image it was taken with")
	// ErrSnapshotBuild is returned by Restore for a snapshot that another
	// build of gvx wrote.
	ErrSnapshotBuild = errors.New("sentry: the snapshot was written by another build of gvx")
	// ErrSnapshotDamaged is returned by Restore for a snapshot whose bytes
	// are not the ones Checkpoint wrote: damaged, or cut short.
	ErrSnapshotDamaged = errors.New("sentry: the snapshot is damaged or incomplete")
)

// initStdioContainer names init's standard streams in a snapshot: Restore
// gives the restored init the new process's streams under the same names.
const initStdioContainer = "init"

// imageResourceID names the root image in a snapshot.
var imageResourceID = checkpoint.ResourceID{ContainerName: initStdioContainer, Path: "image:root"}

// CheckpointOptions controls Checkpoint.
type CheckpointOptions struct {
	// Stop closes the sandbox once the snapshot is written, without
	// letting the guest run again, so the volumes' images keep exactly
	// the state the snapshot refers to. A sandbox with volumes must be
	// stopped; without Stop the guest runs on after the snapshot.
	Stop bool
	// Annotations travel in the snapshot; the restored sandbox's
	// RestoredAnnotations returns them.
	Annotations map[string]string
}

// refusal is a state of the sandbox that a snapshot cannot hold. It is an
// invalid argument (errors.Is(err, fs.ErrInvalid)): the caller can change
// the state and try again.
type refusal struct{ msg string }

func (e *refusal) Error() string        { return "sentry: cannot checkpoint: " + e.msg }
func (e *refusal) Is(target error) bool { return target == fs.ErrInvalid }

func refuse(format string, args ...any) error {
	return &refusal{msg: fmt.Sprintf(format, args...)}
}

// Checkpoint writes a snapshot of the running sandbox to w. The guest is
// paused while it is written. Each volume's image is then the snapshot's
// other half: Restore needs it (or a clone) in the state Checkpoint left
// it, which is why a sandbox with volumes must be stopped (opts.Stop).
//
// What a snapshot cannot hold is refused with an error that names it:
// processes started with Exec that are still running (their output goes
// to callers that a restored sandbox will not have), an init whose
// standard streams are relayed to a regular file or an in-process writer
// or are a terminal (Restore hands init the new process's streams, which
// works for pipes, sockets and /dev/null), and a file on a volume that was
// deleted while open.
func (s *Sandbox) Checkpoint(w io.Writer, opts CheckpointOptions) error {
	if err := s.checkpoint(w, opts); err != nil {
		return err
	}
	if opts.Stop {
		return s.Close()
	}
	return nil
}

func (s *Sandbox) checkpoint(w io.Writer, opts CheckpointOptions) error {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.release()
	s.mu.Lock()
	err := s.checkpointableLocked()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if processBuildIDErr != nil {
		return fmt.Errorf("sentry: cannot checkpoint without knowing this build: %w", processBuildIDErr)
	}
	if len(s.volumes) > 0 && !opts.Stop {
		return refuse("a sandbox with volumes is checkpointed with Stop, so their images keep the snapshot's state; the guest cannot run on")
	}
	sum := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, sum), 1<<20)
	meta := snapshotMeta{Version: snapshotVersion, Build: processBuildID, Image: s.image, NFTables: s.cfg.NFTables, InitStreams: s.init.stdio.imported, Annotations: opts.Annotations}
	if err := writeSnapshotHeader(bw, meta); err != nil {
		return err
	}
	ctx := s.k.SupervisorContext()
	// Every task stops at its next boundary, and the platform hands over
	// the registers it holds, before the kernel is encoded.
	s.k.Pause()
	s.k.ReceiveTaskStates()
	err = s.k.SaveTo(ctx, nopCloser{bw}, nil, nil, false /* appMFExcludeCommittedZeroPages */, !opts.Stop /* resume */)
	if opts.Stop && err == nil {
		// Killed while paused, no task returns to the guest: the
		// volumes stay as the snapshot saw them until Close flushes
		// and closes them.
		s.k.Kill(linux.WaitStatusTerminationSignal(linux.SIGKILL))
	} else {
		s.k.BeforeResume(ctx)
	}
	s.k.Unpause()
	if err != nil {
		return saveError(err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("sentry: writing the snapshot: %w", err)
	}
	trailer := binary.BigEndian.AppendUint32([]byte(snapshotSumMagic), sum.Sum32())
	if _, err := w.Write(trailer); err != nil {
		return fmt.Errorf("sentry: writing the snapshot: %w", err)
	}
	return nil
}

// checkpointableLocked reports what keeps s from being saved.
//
// Preconditions: s.mu is held.
func (s *Sandbox) checkpointableLocked() error {
	switch s.state {
	case stateCreated:
		return ErrNotStarted
	case stateClosed:
		return ErrClosed
	}
	select {
	case <-s.init.exited:
		return ErrStopped
	default:
	}
	running := 0
	for p := range s.procs {
		if p == s.init {
			continue
		}
		select {
		case <-p.done:
		default:
			running++
		}
	}
	if running > 0 {
		return refuse("%d exec'd processes are still running; wait for them or kill them first", running)
	}
	if s.starting > 0 {
		return refuse("%d execs are starting their processes; wait for them and their processes first", s.starting)
	}
	if st := s.init.stdio; st.tty != nil || len(st.outputs) > 0 || (st.input != nil && st.input.src != nil && !st.input.finished()) {
		return refuse("init's standard streams are a terminal or are relayed to a regular file or an in-process reader or writer; a sandbox to checkpoint needs an init whose streams are pipes, sockets or /dev/null")
	}
	return nil
}

func writeSnapshotHeader(w io.Writer, meta snapshotMeta) error {
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	hdr := make([]byte, 0, len(snapshotMagic)+4+len(b))
	hdr = append(hdr, snapshotMagic...)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(b)))
	hdr = append(hdr, b...)
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("sentry: writing the snapshot: %w", err)
	}
	return nil
}

// headerReadError explains a failure to read a snapshot's header after n
// bytes, which began with start: an end of the stream there means an empty
// or cut-short file, if it began as a snapshot does.
func headerReadError(err error, start []byte, n int) error {
	switch {
	case n == 0 && errors.Is(err, io.EOF):
		return fmt.Errorf("%w: it is empty", ErrNotSnapshot)
	case !strings.HasPrefix(snapshotMagic, string(start[:min(len(start), len(snapshotMagic))])):
		return fmt.Errorf("%w: it does not start with %q", ErrNotSnapshot, snapshotMagic)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: it ends after %d bytes, inside its header (cut short? take it again)", ErrSnapshotDamaged, n)
	}
	return fmt.Errorf("%w: %w", ErrNotSnapshot, err)
}

func readSnapshotHeader(r io.Reader) (snapshotMeta, error) {
	var fixed [len(snapshotMagic) + 4]byte
	if n, err := io.ReadFull(r, fixed[:]); err != nil {
		return snapshotMeta{}, headerReadError(err, fixed[:n], n)
	}
	if string(fixed[:len(snapshotMagic)]) != snapshotMagic {
		return snapshotMeta{}, fmt.Errorf("%w: it does not start with %q", ErrNotSnapshot, snapshotMagic)
	}
	n := binary.BigEndian.Uint32(fixed[len(snapshotMagic):])
	if n > maxSnapshotMeta {
		return snapshotMeta{}, fmt.Errorf("%w: its metadata claims %d bytes", ErrNotSnapshot, n)
	}
	b := make([]byte, n)
	if k, err := io.ReadFull(r, b); err != nil {
		return snapshotMeta{}, headerReadError(err, fixed[:], len(fixed)+k)
	}
	var meta snapshotMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return snapshotMeta{}, fmt.Errorf("%w: bad metadata: %v", ErrNotSnapshot, err)
	}
	if meta.Version != snapshotVersion {
		return snapshotMeta{}, fmt.Errorf("%w: it has format %d; this gvx reads format %d, so take the snapshot again with this gvx", ErrNotSnapshot, meta.Version, snapshotVersion)
	}
	return meta, nil
}

// openSnapshot reads the header of the snapshot of size bytes in r and
// returns a reader of the kernel's stream after it, which ends before the
// trailer.
func openSnapshot(r io.ReadSeeker, size int64) (*bufio.Reader, snapshotMeta, error) {
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, snapshotMeta{}, fmt.Errorf("sentry: reading the snapshot: %w", err)
	}
	br := bufio.NewReaderSize(io.LimitReader(r, max(size-int64(snapshotTrailerLength), 0)), 1<<20)
	meta, err := readSnapshotHeader(br)
	return br, meta, err
}

// checkSnapshotSum checks the checksum in the trailer of the snapshot of
// size bytes in r against its content.
func checkSnapshotSum(r io.ReadSeeker, size int64) error {
	cutShort := fmt.Errorf("%w: it has no checksum at its end, so it was cut short (a full disk, an interrupted copy?): take it again", ErrSnapshotDamaged)
	body := size - int64(snapshotTrailerLength)
	if body < 0 {
		return cutShort
	}
	var trailer [snapshotTrailerLength]byte
	if _, err := r.Seek(body, io.SeekStart); err != nil {
		return fmt.Errorf("sentry: reading the snapshot: %w", err)
	}
	if _, err := io.ReadFull(r, trailer[:]); err != nil {
		return fmt.Errorf("sentry: reading the snapshot: %w", err)
	}
	if string(trailer[:len(snapshotSumMagic)]) != snapshotSumMagic {
		return cutShort
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("sentry: reading the snapshot: %w", err)
	}
	sum := crc32.New(castagnoli)
	if _, err := io.CopyBuffer(sum, io.LimitReader(r, body), make([]byte, 1<<20)); err != nil {
		return fmt.Errorf("sentry: reading the snapshot: %w", err)
	}
	if want, got := binary.BigEndian.Uint32(trailer[len(snapshotSumMagic):]), sum.Sum32(); got != want {
		return fmt.Errorf("%w: its content does not match its checksum (CRC-32C %08x, want %08x), so it was changed after it was written: take it again", ErrSnapshotDamaged, got, want)
	}
	return nil
}

// RestoreStdio is the restored init's standard streams: pipes, sockets or
// terminals (the snapshot's init holds a stream, not a file with an
// offset). A nil stream is /dev/null.
type RestoreStdio struct {
	Stdin, Stdout, Stderr *os.File
}

// Restore creates a running sandbox from the snapshot in r, taken by
// Checkpoint on the same root image (cfg.Image) with the same build of
// gvx. r is read twice: once whole for its checksum, then to decode it. The guest continues where it was saved; its init's standard
// streams become streams'. Processes that were exec'd are not in a
// snapshot (Checkpoint refuses them).
//
// From cfg, Restore uses what belongs to the host process: Image,
// Platform, CPUSet, NoSpinning, MemoryLimit, PidsLimit, ConfigureNetwork
// (the root network stack's interfaces are re-created, as at boot), the
// lockdown and the log. What belongs to the kernel (hostname, CPUs,
// NetRaw, AllowSUID, mounts, nftables) is the snapshot's.
func Restore(cfg Config, r io.ReadSeeker, streams RestoreStdio) (*Sandbox, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	size, err := r.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, fmt.Errorf("sentry: reading the snapshot: %w", err)
	}
	br, meta, err := openSnapshot(r, size)
	if err != nil {
		return nil, err
	}
	if err := initGlobal(); err != nil {
		return nil, err
	}
	if processBuildIDErr != nil {
		return nil, fmt.Errorf("sentry: cannot restore without knowing this build: %w", processBuildIDErr)
	}
	if meta.Build != processBuildID {
		return nil, fmt.Errorf("%w (%s; this is %s): restore it with the gvx (rungv) that wrote it, or take it again with this one", ErrSnapshotBuild, shortBuildID(meta.Build), shortBuildID(processBuildID))
	}
	fp, err := fingerprintImage(cfg.Image)
	if err != nil {
		return nil, err
	}
	if fp != meta.Image {
		return nil, ErrSnapshotImage
	}
	if err := checkSnapshotSum(r, size); err != nil {
		return nil, err
	}
	if br, _, err = openSnapshot(r, size); err != nil {
		return nil, err
	}
	cfg.NFTables = meta.NFTables
	s, cu, err := claim(cfg)
	if err != nil {
		return nil, err
	}
	defer cu.Clean()
	s.image, s.restoredAnnotations = fp, meta.Annotations

	// The descriptors the snapshot's host files are re-bound to: the
	// image and init's streams that were host files. Once the kernel is
	// being decoded they are its own (the image's is wrapped in an
	// os.File with a finalizer), even if decoding fails; before that,
	// they are closed here.
	fdmap := make(map[checkpoint.ResourceID]int)
	fdsTaken := false
	defer func() {
		if fdsTaken {
			return
		}
		for _, fd := range fdmap {
			unix.Close(fd)
		}
	}()
	if fdmap[imageResourceID], err = dupFile(cfg.Image); err != nil {
		return nil, fmt.Errorf("sentry: duplicating the image descriptor: %w", err)
	}
	given := []*os.File{streams.Stdin, streams.Stdout, streams.Stderr}
	for _, i := range meta.InitStreams {
		if i < 0 || i >= len(given) {
			return nil, fmt.Errorf("%w: init stream %d", ErrNotSnapshot, i)
		}
		fd, err := stdioFD(given[i], i)
		if err != nil {
			return nil, err
		}
		fdmap[host.MakeResourceID(initStdioContainer, i)] = fd
	}

	// The volumes the snapshot's filesystems are re-bound to, by mount
	// point; each must be the image Checkpoint left (or a clone of it).
	if s.volumes, err = openVolumes(cfg.Volumes, cfg.VolumeErrors); err != nil {
		return nil, err
	}
	cu.Add(func() { closeVolumes(gcontext.Background(), s.volumes) })
	restoreVolumes := make(map[string]*ext4fs.Volume, len(s.volumes))
	for i, v := range s.volumes {
		restoreVolumes[cfg.Volumes[i].Target] = v
	}

	plat, mf, err := s.prepareHost()
	if err != nil {
		return nil, err
	}
	k := &kernel.Kernel{Platform: plat}
	k.SetMemoryFile(mf)
	s.k = k

	ctx := gcontext.WithValues(k.SupervisorContext(), map[any]any{
		vfs.CtxRestoreFilesystemFDMap: fdmap,
		pgalloc.CtxMemoryFileMap:      make(map[checkpoint.ResourceID]*pgalloc.MemoryFile),
		ext4fs.CtxRestoreVolumes:      restoreVolumes,
	})
	netArgs := restoreNetwork{configure: cfg.ConfigureNetwork, nftables: cfg.NFTables}
	clocks := sentrytime.NewCalibratedClocks(false /* monotonicRawEnabled */)
	fdsTaken = true
	if err := k.LoadFrom(ctx, br, nil, nil, netArgs, clocks, &vfs.CompleteRestoreOptions{}, nil); err != nil {
		return nil, restoreError(err)
	}
	cu.Add(k.Release)
	for i, v := range s.volumes {
		if !v.Mounted() {
			return nil, fmt.Errorf("sentry: the snapshot has no volume at %s; restore with the volumes it was taken with", cfg.Volumes[i].Target)
		}
	}
	if err := s.limitHost(plat, &cu); err != nil {
		return nil, err
	}
	init := k.GlobalInit()
	if init == nil {
		return nil, fmt.Errorf("%w: it has no init process", ErrNotSnapshot)
	}
	s.mns = init.Leader().MountNamespace()
	s.mns.IncRef()
	cu.Add(func() { s.mns.DecRef(ctx) })

	p := newProcess(s, init, k.RootPIDNamespace().IDOfThreadGroup(init), &stdio{}, &ProcessSpec{})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.filter != nil {
		if err := s.filter.Install(); err != nil {
			return nil, err
		}
	}
	if err := s.startKernelLocked(p); err != nil {
		return nil, err
	}
	cu.Release()
	return s, nil
}

// saveError shortens an encoding failure as restoreError does; a refusal
// (an ext4 volume's) keeps its meaning for errors.Is.
func saveError(err error) error {
	msg := err.Error()
	i := strings.IndexByte(msg, '\n')
	if i < 0 {
		return fmt.Errorf("sentry: saving the kernel: %w", err)
	}
	log.Warningf("checkpoint failed: %v", err)
	return fmt.Errorf("sentry: saving the kernel (an object in the guest's kernel cannot be saved; please report it): %s", strings.TrimSuffix(msg[:i], ":"))
}

// restoreError shortens a decoding failure: gVisor's state errors carry
// goroutine dumps, which go to the log, not to the user.
func restoreError(err error) error {
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		log.Warningf("restore failed: %v", err)
		msg = strings.TrimSuffix(msg[:i], ":")
	}
	return fmt.Errorf("sentry: restoring the kernel (is the snapshot complete, and from this build of gvx?): %s", msg)
}

// RestoredAnnotations returns the annotations of the snapshot the sandbox
// was restored from (CheckpointOptions.Annotations), or nil.
func (s *Sandbox) RestoredAnnotations() map[string]string { return s.restoredAnnotations }

// stdioFD returns a close-on-exec descriptor for the restored init's
// stream i: f's, or /dev/null's.
func stdioFD(f *os.File, i int) (int, error) {
	if f == nil {
		fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("sentry: opening /dev/null for the restored init's stream %d: %w", i, err)
		}
		return fd, nil
	}
	if isRegular(f) {
		return -1, fmt.Errorf("sentry: the restored init's stream %d is a regular file; give it a pipe (and copy the pipe to the file), a socket, or nil for /dev/null", i)
	}
	fd, err := dupFile(f)
	if err != nil {
		return -1, fmt.Errorf("sentry: duplicating the restored init's stream %d: %w", i, err)
	}
	return fd, nil
}

// restoreNetwork re-creates the root network stack's interfaces and
// packet filter tables after the kernel is decoded, as New did at boot.
// gVisor's snapshot holds neither: interfaces are the host's to give, and
// netfilter rules are not savable; both start as at boot.
//
// restoreNetwork implements inet.NetworkArgs.
type restoreNetwork struct {
	configure func(*stack.Stack) error
	nftables  bool
}

// ConfigureNetwork implements inet.NetworkArgs.ConfigureNetwork.
func (n restoreNetwork) ConfigureNetwork(s inet.Stack) error {
	ns, ok := s.(*netstack.Stack)
	if !ok {
		return fmt.Errorf("sentry: the restored network stack is a %T, not gVisor's netstack", s)
	}
	if ns.Stack.IPTables() == nil {
		ns.Stack.SetIPTables(netfilter.DefaultLinuxTables(ns.Stack.Clock(), ns.Stack.InsecureRNG()))
	}
	if n.nftables && ns.Stack.NFTables() == nil {
		enableNFTables(ns.Stack)
	}
	if err := addLoopback(ns.Stack); err != nil {
		return err
	}
	if n.configure != nil {
		return n.configure(ns.Stack)
	}
	return nil
}

// nopCloser lets SaveTo close a writer Checkpoint still flushes.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// shortBuildID names a build in an error message: by the last part of a
// Go build ID, the hash of the linked executable.
func shortBuildID(id string) string {
	if id == "" {
		return "an unnamed build"
	}
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		return "build …" + id[i+1:]
	}
	return "build " + id
}
