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
func newPlatform(p Platform, cpus int) (platform.Platform, error) {
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
	})
	if err != nil {
		if dev != nil {
			dev.Close()
		}
		return nil, fmt.Errorf("sentry: creating platform %q: %w", p, err)
	}
	return plat, nil
}
