package sentry

import (
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
)

// credentials returns the guest credentials for spec.
//
// Root holds every capability: the sandbox is the security boundary, and
// Docker inside needs CAP_SYS_ADMIN to mount. CAP_NET_RAW is withheld unless
// the sandbox allows raw sockets. Other users hold none, as after execve on
// Linux.
func (s *Sandbox) credentials(spec *ProcessSpec) *auth.Credentials {
	caps := auth.AllCapabilities
	if !s.cfg.NetRaw {
		caps &^= auth.CapabilitySetOf(linux.CAP_NET_RAW)
	}
	tc := &auth.TaskCapabilities{BoundingCaps: caps}
	if spec.UID == 0 {
		tc.PermittedCaps = caps
		tc.EffectiveCaps = caps
	}
	extra := make([]auth.KGID, 0, len(spec.ExtraGIDs))
	for _, g := range spec.ExtraGIDs {
		extra = append(extra, auth.KGID(g))
	}
	return auth.NewUserCredentials(auth.KUID(spec.UID), auth.KGID(spec.GID), extra, tc, s.k.RootUserNamespace())
}
