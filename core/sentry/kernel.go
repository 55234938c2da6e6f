package sentry

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/cpuid"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/cgroup2fs"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/host"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/tmpfs"
	"gvisor.dev/gvisor/pkg/sentry/inet"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/loader"
	"gvisor.dev/gvisor/pkg/sentry/pgalloc"
	"gvisor.dev/gvisor/pkg/sentry/platform"
	sentrytime "gvisor.dev/gvisor/pkg/sentry/time"
	"gvisor.dev/gvisor/pkg/sentry/usage"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// newKernel creates and initialises a kernel on plat and mf with a root
// network namespace that has only a loopback interface. It returns the root
// network stack so the caller can add NICs.
//
// Preconditions: Sandbox.prepareHost ran (nftables and memory totals).
//
// On success the kernel owns mf.
func newKernel(c Config, plat platform.Platform, mf *pgalloc.MemoryFile) (*kernel.Kernel, *stack.Stack, error) {
	k := &kernel.Kernel{
		Platform:  plat,
		AllowSUID: c.AllowSUID,
	}
	k.SetMemoryFile(mf)

	vdso, err := loader.PrepareVDSO(k.MemoryFile())
	if err != nil {
		return nil, nil, fmt.Errorf("sentry: preparing the VDSO: %w", err)
	}
	tk := kernel.NewTimekeeper()
	params := kernel.NewVDSOParamPage(k.MemoryFile(), vdso.ParamPage.FileRange())
	tk.SetClocks(sentrytime.NewCalibratedClocks(false /* monotonicRawEnabled */), params)

	userns := auth.NewRootUserNamespace()
	creator := &netstackCreator{clock: tk, ids: k, netRaw: c.NetRaw, packetWrite: c.AllowPacketSocketWrite, nftables: c.NFTables}
	rootStack, err := creator.newStack()
	if err != nil {
		return nil, nil, err
	}
	if err := addLoopback(rootStack.Stack); err != nil {
		rootStack.Destroy()
		return nil, nil, err
	}

	err = k.Init(kernel.InitKernelArgs{
		FeatureSet:           cpuid.HostFeatureSet().Fixed(),
		Timekeeper:           tk,
		RootUserNamespace:    userns,
		RootNetworkNamespace: inet.NewRootNamespace(rootStack, creator, userns),
		ApplicationCores:     uint(c.CPUs),
		Vdso:                 vdso,
		VdsoParams:           params,
		RootUTSNamespace:     kernel.NewUTSNamespace(c.Hostname, "", userns),
		RootIPCNamespace:     kernel.NewIPCNamespace(userns),
		RootPIDNamespace:     kernel.NewRootPIDNamespace(userns),
		MaxFDLimit:           kernel.MaxFdLimit,
		// Init fails without it: the kernel always keeps a cgroup2
		// hierarchy.
		Cgroup2FSInit: cgroup2fs.NewFilesystem,
	})
	if err != nil {
		rootStack.Destroy()
		return nil, nil, fmt.Errorf("sentry: initialising the kernel: %w", err)
	}
	if err := registerFilesystems(k.VFS()); err != nil {
		k.Release()
		return nil, nil, err
	}
	if err := setHostMount(k); err != nil {
		k.Release()
		return nil, nil, err
	}
	return k, rootStack.Stack, nil
}

// setHostMount gives the kernel the anonymous mount that imported host
// descriptors (stdio) live on. It is never visible to the guest.
func setHostMount(k *kernel.Kernel) error {
	fs, err := host.NewFilesystem(k.VFS())
	if err != nil {
		return fmt.Errorf("sentry: creating the host descriptor filesystem: %w", err)
	}
	defer fs.DecRef(k.SupervisorContext())
	k.SetHostMount(k.VFS().NewDisconnectedMount(fs, nil, &vfs.MountOptions{}))
	return nil
}

// setMemoryTotals makes /proc/meminfo report limit as MemTotal and sizes
// tmpfs defaults (half of the total) from it. Both are process-wide.
func setMemoryTotals(limit uint64) {
	if limit == 0 {
		usage.MinimumTotalMemoryBytes = defaultMinimumTotalMemory
		usage.MaximumTotalMemoryBytes = 0
		tmpfs.SetTotalHostMem(0)
		return
	}
	usage.MinimumTotalMemoryBytes = limit
	usage.MaximumTotalMemoryBytes = limit
	tmpfs.SetTotalHostMem(limit)
}

// defaultMinimumTotalMemory is gVisor's default floor for the reported
// total memory, restored when a sandbox has no limit.
const defaultMinimumTotalMemory = 2 << 30
