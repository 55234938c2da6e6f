package sentry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/cleanup"
	gcontext "gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/pgalloc"
	"gvisor.dev/gvisor/pkg/sentry/platform"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
	"gvisor.dev/gvisor/pkg/tcpip/nftables"

	"z.gfire.dev/gvx/core/lockdown"
	"z.gfire.dev/gvx/core/sentry/ext4fs"
)

// state is the life cycle of a Sandbox.
type state int

const (
	// stateCreated: the kernel exists, no guest code has run.
	stateCreated state = iota
	// stateRunning: Start succeeded; the kernel runs.
	stateRunning
	// stateClosed: the kernel is released.
	stateClosed
)

// Errors returned for calls in the wrong state.
var (
	ErrStarted    = errors.New("sentry: the sandbox was already started")
	ErrNotStarted = errors.New("sentry: the sandbox is not running; call Start first")
	ErrStopped    = errors.New("sentry: the sandbox's init process has exited")
	ErrClosed     = errors.New("sentry: the sandbox is closed")
)

// Sandbox is a gVisor kernel running in this process.
type Sandbox struct {
	cfg    Config
	k      *kernel.Kernel
	mns    *vfs.MountNamespace // the guest's root mount namespace; we hold a reference
	filter *lockdown.Filter    // nil when lockdown is disabled
	// volumes are the mounted ext4 volumes, in Config.Volumes order.
	volumes []*ext4fs.Volume
	// closed is closed when Close is done; closeErr is its outcome.
	closed   chan struct{}
	closeErr error
	oom      *oomKiller // nil without a memory limit
	// image identifies the root image in snapshots.
	image imageFingerprint
	// restoredAnnotations are those of the snapshot s was restored from.
	restoredAnnotations map[string]string

	// killed is closed when Close starts killing the guest; relays stop
	// waiting for output then.
	killed chan struct{}

	mu    sync.Mutex
	state state
	init  *Process
	procs map[*Process]struct{}
	files map[*File]struct{}
	// starting counts Execs that are creating their process, which is not
	// in procs yet.
	starting int
	// users counts host-side operations (file access, Execs creating
	// their process) in progress; Close waits for them before it kills
	// the guest and releases the kernel.
	users sync.WaitGroup
}

// New creates a sandbox: platform, kernel, root filesystem, standard mounts
// and network. No guest code runs until Start.
//
// Unless cfg.DisableLockdown is set, New first drops every capability and
// sets NO_NEW_PRIVS on the whole process.
func New(cfg Config) (*Sandbox, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s, cu, err := claim(cfg)
	if err != nil {
		return nil, err
	}
	defer cu.Clean()

	// The caller may close cfg.Image once New returns.
	if s.image, err = fingerprintImage(cfg.Image); err != nil {
		return nil, err
	}
	imageFD, err := dupFile(cfg.Image)
	if err != nil {
		return nil, fmt.Errorf("sentry: duplicating the image descriptor: %w", err)
	}
	imageOwned := true
	defer func() {
		if imageOwned {
			unix.Close(imageFD)
		}
	}()
	if s.volumes, err = openVolumes(cfg.Volumes, cfg.VolumeErrors); err != nil {
		return nil, err
	}
	// Registered before the kernel's release, so it runs after it.
	cu.Add(func() { closeVolumes(gcontext.Background(), s.volumes) })

	plat, mf, err := s.prepareHost()
	if err != nil {
		return nil, err
	}
	k, rootStack, err := newKernel(cfg, plat, mf)
	if err != nil {
		return nil, err
	}
	s.k = k
	cu.Add(k.Release)
	if err := s.limitHost(plat, &cu); err != nil {
		return nil, err
	}
	ctx := k.SupervisorContext()

	creds := auth.NewRootCredentials(k.RootUserNamespace())
	imageOwned = false
	mns, err := newRootMountNamespace(ctx, k, creds, imageFD, cfg.MemoryLimit)
	if err != nil {
		return nil, err
	}
	s.mns = mns
	cu.Add(func() { mns.DecRef(ctx) })
	if err := mountStandard(ctx, k.VFS(), creds, mns); err != nil {
		return nil, err
	}
	if err := mountVolumes(ctx, k.VFS(), creds, mns, cfg.Volumes, s.volumes); err != nil {
		return nil, err
	}

	if cfg.ConfigureNetwork != nil {
		if err := cfg.ConfigureNetwork(rootStack); err != nil {
			return nil, fmt.Errorf("sentry: configuring the network: %w", err)
		}
	}
	cu.Release()
	return s, nil
}

// claim makes a Sandbox for cfg the process's live sandbox, with the
// process-wide parts of gVisor ready and its log pointed at cfg's writer.
// The returned cleanup gives the claim up.
func claim(cfg Config) (*Sandbox, cleanup.Cleanup, error) {
	if err := initGlobal(); err != nil {
		return nil, cleanup.Cleanup{}, err
	}
	s := &Sandbox{cfg: cfg, killed: make(chan struct{}), closed: make(chan struct{}), procs: make(map[*Process]struct{}), files: make(map[*File]struct{})}
	if err := claimProcess(s); err != nil {
		return nil, cleanup.Cleanup{}, err
	}
	configureLog(cfg.LogWriter, cfg.Debug)
	return s, cleanup.Make(func() { releaseProcess(s) }), nil
}

// prepareHost readies the process for s's kernel, as New and Restore both
// need it: CPU pinning and dropped privileges (before the platform forks
// its stubs, so they inherit the mask and nothing else), the platform, the
// lockdown filter (prepared, installed at start), the memory file, and
// gVisor's process-wide nftables switch and memory totals.
func (s *Sandbox) prepareHost() (platform.Platform, *pgalloc.MemoryFile, error) {
	cfg := s.cfg
	if len(cfg.CPUSet) > 0 {
		if err := pinToCPUs(cfg.CPUSet); err != nil {
			return nil, nil, err
		}
	}
	if !cfg.DisableLockdown {
		if err := lockdown.DropPrivileges(); err != nil {
			return nil, nil, err
		}
	}
	plat, err := newPlatform(cfg.Platform, cfg.CPUs, cfg.NoSpinning)
	if err != nil {
		return nil, nil, err
	}
	if !cfg.DisableLockdown {
		// Precompiled for the usual configurations: microseconds.
		opts := cfg.Lockdown
		opts.Platform = plat.SeccompInfo()
		if s.filter, err = lockdown.Prepare(opts); err != nil {
			return nil, nil, err
		}
	}
	mf, err := newMemoryFile()
	if err != nil {
		return nil, nil, err
	}
	if cfg.NFTables {
		// Process-wide and irreversible: the netlink netfilter protocol
		// consults the same flag.
		nftables.EnableNFTables()
	}
	setMemoryTotals(cfg.MemoryLimit)
	return plat, mf, nil
}

// limitHost applies the host-side limits to s's kernel, made or restored:
// the platform's stub pool, the memory file's ceiling and the pids limit,
// whose undoing it adds to cu.
func (s *Sandbox) limitHost(plat platform.Platform, cu *cleanup.Cleanup) error {
	cfg := s.cfg
	if err := prepareAddressSpaces(cfg.Platform, plat, bootAddressSpaces); err != nil {
		return err
	}
	if cfg.MemoryLimit > 0 {
		if err := capMemoryFile(s.k.MemoryFile(), cfg.MemoryLimit); err != nil {
			return err
		}
	}
	if cfg.PidsLimit > 0 {
		k := s.k
		setPidsLimit(k, cfg.PidsLimit)
		cu.Add(func() { clearPidsLimit(k) })
	}
	return nil
}

// dupFile duplicates f's descriptor, close-on-exec.
func dupFile(f *os.File) (int, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	nfd := -1
	var dupErr error
	if err := sc.Control(func(fd uintptr) {
		nfd, dupErr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	return nfd, dupErr
}

// Start creates the sandbox's init process, locks the host process down
// (unless disabled) and starts the kernel. It may be called once.
//
// When init exits, every other guest process is killed, as when a PID
// namespace's init dies on Linux.
func (s *Sandbox) Start(spec ProcessSpec) (*Process, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	return s.start(&spec, nil)
}

// start implements Start and StartIdle; exe, if not nil, is the executable
// to run instead of resolving spec.Argv[0].
func (s *Sandbox) start(spec *ProcessSpec, exe *vfs.FileDescription) (*Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case stateRunning:
		return nil, ErrStarted
	case stateClosed:
		return nil, ErrClosed
	}
	p, err := s.createProcess(spec, true /* isInit */, exe)
	if err != nil {
		return nil, err
	}
	if s.filter != nil {
		if err := s.filter.Install(); err != nil {
			// No guest instruction may run unconfined: let the
			// kernel run only to reap the killed init.
			s.k.Kill(linux.WaitStatusTerminationSignal(linux.SIGKILL))
			s.startKernelLocked(p)
			return nil, err
		}
	}
	if err := s.startKernelLocked(p); err != nil {
		return nil, err
	}
	return p, nil
}

// startKernelLocked starts the kernel with p as init.
//
// Preconditions: s.mu is held; s.state is stateCreated.
func (s *Sandbox) startKernelLocked(p *Process) error {
	if err := s.k.Start(); err != nil {
		return fmt.Errorf("sentry: starting the kernel: %w", err)
	}
	s.state = stateRunning
	s.init = p
	s.procs[p] = struct{}{}
	if s.cfg.MemoryLimit > 0 {
		s.oom = newOOMKiller(s.k, s.cfg.MemoryLimit)
		go s.oom.run()
	}
	p.start()
	return nil
}

// Exec starts another process in the running sandbox. Processes run
// concurrently; Exec may be called from many goroutines. If ctx is done
// before the process exits, the process is killed.
func (s *Sandbox) Exec(ctx context.Context, spec ProcessSpec) (*Process, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.beginExec(); err != nil {
		return nil, err
	}
	// Creating the process reads guest files (the PATH lookup,
	// /etc/passwd for HOME, the executable) and can take long. It runs
	// without s.mu, which other Execs, exiting processes and file calls
	// need; the kernel's CreateProcess serialises its own part. The exec
	// begun keeps Close from releasing the kernel under it.
	p, err := s.createProcess(&spec, false /* isInit */, nil)
	if err = s.endExec(p, err); err != nil {
		return nil, err
	}

	p.start()
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				p.Kill()
			case <-p.exited:
			}
		}()
	}
	return p, nil
}

// beginExec checks that s can run another process and registers an Exec
// creating one, which Close waits for and Checkpoint refuses. endExec
// ends it.
func (s *Sandbox) beginExec() error {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	s.starting++
	s.users.Add(1)
	return nil
}

// endExec ends an Exec registered by beginExec, whose process creation
// returned p and createErr, and returns the Exec's error. It starts p's
// task, as one of s's processes if s is still open. If Close began
// meanwhile, it is waiting for this Exec: p is killed before it runs any
// guest code, and Close's wait for the guest to exit includes it.
func (s *Sandbox) endExec(p *Process, createErr error) error {
	defer s.users.Done()
	s.mu.Lock()
	s.starting--
	if createErr != nil {
		s.mu.Unlock()
		if errors.Is(createErr, linuxerr.ENOMEM) && s.initExiting() {
			// The kernel refuses new processes once init has begun to
			// exit, with ENOMEM as Linux does; the sandbox is ending,
			// not out of memory.
			return ErrStopped
		}
		return createErr
	}
	if s.state == stateClosed {
		s.mu.Unlock()
		s.discard(p)
		return ErrClosed
	}
	s.procs[p] = struct{}{}
	s.k.StartProcess(p.tg)
	s.mu.Unlock()
	return nil
}

// discard kills a created process before it runs and drops its relays,
// which never run: no caller will read or feed its streams. The kernel
// counts a created task as live until it has run and exited, so it is
// started, with SIGKILL pending, which it acts on before any guest code.
//
// Preconditions: p was created and not started; the kernel is not
// released.
func (s *Sandbox) discard(p *Process) {
	s.k.SendExternalSignalThreadGroup(p.tg, &linux.SignalInfo{Signo: int32(linux.SIGKILL)})
	s.k.StartProcess(p.tg)
	p.stdio.dropRelays(s.k.SupervisorContext())
}

// initExiting reports whether the sandbox's init process has begun to exit.
//
// Preconditions: the sandbox was started.
func (s *Sandbox) initExiting() bool {
	leader := s.init.tg.Leader()
	return leader == nil || len(s.k.RootPIDNamespace().IDsOfTasks([]*kernel.Task{leader}, true)) == 0
}

// start runs the process's relays and its watcher.
func (p *Process) start() {
	p.stdio.start()
	go p.watch()
}

// forget drops p from the live set once it is done.
func (s *Sandbox) forget(p *Process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p != s.init {
		delete(s.procs, p)
	}
}

// Wait waits for the init process and returns how it ended.
func (s *Sandbox) Wait() (ExitStatus, error) {
	s.mu.Lock()
	p := s.init
	s.mu.Unlock()
	if p == nil {
		return ExitStatus{}, ErrNotStarted
	}
	return p.Wait()
}

// Init returns the init process, or nil before Start.
func (s *Sandbox) Init() *Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.init
}
