package sentry

import (
	"strings"
	"testing"
)

func TestAllowSUID(t *testing.T) {
	for _, allow := range []bool{false, true} {
		s := newSandbox(t, Config{AllowSUID: allow})
		startIdle(t, s)
		plain := execAndWait(t, s, ProcessSpec{Argv: []string{"/bin/geteuid"}, UID: 1000, GID: 1000})
		suid := execAndWait(t, s, ProcessSpec{Argv: []string{"/bin/suid-geteuid"}, UID: 1000, GID: 1000})
		// 1000 % 256 = 232.
		want := 232
		if allow {
			want = 0
		}
		if plain.status.ExitCode() != 232 || suid.status.ExitCode() != want {
			t.Errorf("AllowSUID=%v: geteuid %v, set-user-ID geteuid %v; want 232 and %d", allow, plain.status, suid.status, want)
		}
		s.Close()
	}
}

func TestNetRaw(t *testing.T) {
	for _, raw := range []bool{false, true} {
		s := newSandbox(t, Config{NetRaw: raw})
		r := startAndWait(t, s, sh(`grep CapEff /proc/self/status; ping -c 1 -W 2 127.0.0.1 >/dev/null 2>&1 && echo ping-ok || echo ping-failed`))
		// CAP_NET_RAW is bit 13.
		hasCap := !strings.Contains(r.stdout, "CapEff:\t000001ffffffdfff") && strings.Contains(r.stdout, "CapEff:\t000001ffffffffff")
		pinged := strings.Contains(r.stdout, "ping-ok")
		if hasCap != raw || pinged != raw {
			t.Errorf("NetRaw=%v: %q (CAP_NET_RAW %v, ping %v)", raw, r.stdout, hasCap, pinged)
		}
		s.Close()
	}
}
