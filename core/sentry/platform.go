package sentry

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/sentry/platform"

	// Register the platforms a Config may name.
	_ "gvisor.dev/gvisor/pkg/sentry/platform/kvm"
	_ "gvisor.dev/gvisor/pkg/sentry/platform/ptrace"
	_ "gvisor.dev/gvisor/pkg/sentry/platform/systrap"
)

// newPlatform creates the syscall interception platform named p.
//
// Preconditions: the process may still open files (KVM opens /dev/kvm).
func newPlatform(p Platform, cpus int, noSpinning bool) (platform.Platform, error) {
	ctor, err := platform.Lookup(string(p))
	if err != nil {
		return nil, fmt.Errorf("sentry: platform %q is not available: %w", p, err)
	}
	dev, err := ctor.OpenDevice("")
	if err != nil {
		return nil, fmt.Errorf("sentry: opening the device of platform %q (for kvm, /dev/kvm must be readable and writable): %w", p, err)
	}
	plat, err := ctor.New(platform.Options{
		DeviceFile:       dev,
		ApplicationCores: cpus,
		DisableFastPath:  noSpinning,
	})
	if err != nil {
		if dev != nil {
			dev.Close()
		}
		return nil, fmt.Errorf("sentry: creating platform %q: %w%s", p, err, withPlatformHint(err))
	}
	return plat, nil
}

// bootAddressSpaces is how many systrap stub processes a sandbox prepares
// at boot: its init's, the first Exec's and one for a process that forks.
const bootAddressSpaces = 3

// prepareAddressSpaces creates n address spaces and releases them, which
// leaves their stub processes in systrap's pool for the next processes.
//
// Why: with many sandboxes on few cores, creating a stub later (a clone
// injected into another stub with ptrace) sometimes stalled for tens of
// seconds, every exec in flight with it; stubs made at boot, when nothing
// else in the sandbox runs, stall far less often (benchmarks/README, "Fleet
// stalls"). Other platforms keep no pool.
func prepareAddressSpaces(p Platform, plat platform.Platform, n int) error {
	if p != PlatformSystrap {
		return nil
	}
	spaces := make([]platform.AddressSpace, 0, n)
	defer func() {
		for _, as := range spaces {
			as.Release()
		}
	}()
	for range n {
		as, err := plat.NewAddressSpace()
		if err != nil {
			return fmt.Errorf("sentry: preparing the platform's stub processes: %w%s", err, withPlatformHint(err))
		}
		spaces = append(spaces, as)
	}
	return nil
}
