package sentry

import "gvisor.dev/gvisor/pkg/sentry/kernel"

// wrapSyscalls replaces, in every registered syscall table, each of the
// named system calls that the table's architecture has with wrap of it.
//
// Preconditions: no kernel is running (the tables are process-wide).
func wrapSyscalls(names []string, wrap func(kernel.SyscallFn) kernel.SyscallFn) {
	for _, table := range kernel.SyscallTables() {
		for _, name := range names {
			sysno, err := table.LookupNo(name)
			if err != nil {
				continue // not on this architecture (arm64 has no fork or open)
			}
			sc := table.Table[sysno]
			sc.Fn = wrap(sc.Fn)
			table.Table[sysno] = sc
		}
		// Rebuild the fast lookup array from the edited map.
		table.Init()
	}
}
