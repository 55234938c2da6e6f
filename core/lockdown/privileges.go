package lockdown

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// DropPrivileges sets PR_SET_NO_NEW_PRIVS and clears every capability set
// (effective, permitted, inheritable, ambient and, where CAP_SETPCAP allows,
// bounding) on every thread of the process. It is idempotent and needs no
// privilege.
func DropPrivileges() error { return dropPrivileges(0) }

// dropPrivileges is DropPrivileges keeping the capabilities in keep (a mask
// of 1<<CAP_*) in the effective and permitted sets.
//
// Preconditions: keep is within the permitted set.
func dropPrivileges(keep uint64) error {
	if err := allThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1); err != nil {
		return fmt.Errorf("lockdown: setting PR_SET_NO_NEW_PRIVS: %w", err)
	}
	if err := dropBoundingSet(); err != nil {
		return err
	}
	if err := allThreadsPrctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL); err != nil && err != unix.EINVAL {
		// EINVAL: the kernel predates ambient capabilities, so there are
		// none to clear.
		return fmt.Errorf("lockdown: clearing ambient capabilities: %w", err)
	}
	if err := setCapabilities(keep); err != nil {
		return fmt.Errorf("lockdown: clearing capabilities: %w", err)
	}
	return nil
}

// dropBoundingSet removes every capability from the bounding set if the
// process may (CAP_SETPCAP). The bounding set is per thread but is only
// consulted at execve, which the filter denies; dropping it is defence in
// depth, so lacking CAP_SETPCAP is not an error.
func dropBoundingSet() error {
	has, err := hasEffectiveCap(unix.CAP_SETPCAP)
	if err != nil {
		return fmt.Errorf("lockdown: reading capabilities: %w", err)
	}
	if !has {
		return nil
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := allThreadsPrctl(unix.PR_CAPBSET_DROP, uintptr(c)); err != nil && err != unix.EINVAL {
			return fmt.Errorf("lockdown: dropping capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}
