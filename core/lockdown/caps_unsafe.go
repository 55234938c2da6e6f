package lockdown

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// capData is the argument of capget(2) and capset(2) for
// _LINUX_CAPABILITY_VERSION_3: two 32-bit halves of each set.
type capData [2]unix.CapUserData

// hasEffectiveCap reports whether the calling thread has capability c in its
// effective set.
func hasEffectiveCap(c int) (bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data capData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, err
	}
	return data[c/32].Effective&(1<<(uint(c)%32)) != 0, nil
}

// setCapabilities makes keep the effective and permitted sets and empties
// the inheritable set of every thread. Capabilities are per thread, and the
// Go runtime has many.
func setCapabilities(keep uint64) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data capData
	for i := range data {
		data[i].Effective = uint32(keep >> (32 * i))
		data[i].Permitted = uint32(keep >> (32 * i))
	}
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
