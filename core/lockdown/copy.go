package lockdown

import "io"

// Copy copies src to dst through buf, as io.CopyBuffer does, but without
// the ReadFrom and WriteTo fast paths (copy_file_range, splice, sendfile).
// Code that copies after lockdown must use it: the lockdown allows none of
// those system calls, nor the uname(2) with which the standard library
// checks the kernel version before its first copy_file_range — a check
// made lazily, on the first copy between two files, so whether it comes
// before or after Install is a race.
func Copy(dst io.Writer, src io.Reader, buf []byte) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
}
