package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// violateLockdown makes a host system call no allowlist has (acct(2)), so
// a locked-down rungv dies with SIGSYS on the spot. `rungv run
// --debug-lockdown-selftest` uses it to prove the filter is enforced, and
// callers to prove they report such a death.
func violateLockdown() {
	unix.Acct("")
	fmt.Fprintln(os.Stderr, "rungv: the lockdown self-test survived a forbidden system call: the filter is NOT enforced")
	os.Exit(99)
}
