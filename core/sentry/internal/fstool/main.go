// Command fstool is a static helper the volume tests and benchmarks copy
// into sandboxes: it does what busybox cannot (extended attributes,
// renameat2, O_TMPFILE, mmap checks, timed metadata loops) and lists
// trees in core/internal/treecheck's format, so the guest's view and the
// host's view of a volume compare field by field.
//
//	fstool list DIR                     JSON treecheck.Listing of DIR
//	fstool xattrs DIR                   JSON {path: {name: value}} of DIR
//	fstool setxattr PATH NAME VALUE
//	fstool getxattr PATH NAME
//	fstool rename OLD NEW exchange|noreplace|whiteout
//	fstool tmpfile DIR NAME             O_TMPFILE, write, linkat(NAME)
//	fstool mmap PATH                    MAP_SHARED/MAP_PRIVATE coherence
//	fstool bench DIR N                  create/stat/unlink N files, rates
//	fstool utimens PATH SEC NSEC        set atime and mtime
//	fstool setxattrhex PATH NAME HEX    set a binary attribute (ACLs)
//	fstool getxattrhex PATH NAME
//	fstool fallocate PATH MODE OFF LEN  fallocate(2) with a numeric mode
//	fstool fifosignal PATH              a FIFO's blocked open, interrupted by
//	                                    a SA_RESTART signal, restarts
package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/internal/treecheck"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fstool:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: fstool list|xattrs|setxattr|getxattr|rename|tmpfile|mmap|bench|utimens ...")
	}
	need := func(n int) error {
		if len(args)-1 != n {
			return fmt.Errorf("%s takes %d arguments", args[0], n)
		}
		return nil
	}
	switch args[0] {
	case "list":
		if err := need(1); err != nil {
			return err
		}
		l, err := treecheck.FromDir(args[1])
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(l)
	case "xattrs":
		if err := need(1); err != nil {
			return err
		}
		x, err := listXattrs(args[1])
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(x)
	case "setxattr":
		if err := need(3); err != nil {
			return err
		}
		return setXattr(args[1], args[2], args[3])
	case "getxattr":
		if err := need(2); err != nil {
			return err
		}
		v, err := getXattr(args[1], args[2])
		if err != nil {
			return err
		}
		fmt.Println(v)
		return nil
	case "rename":
		if err := need(3); err != nil {
			return err
		}
		return rename2(args[1], args[2], args[3])
	case "tmpfile":
		if err := need(2); err != nil {
			return err
		}
		return tmpfile(args[1], args[2])
	case "mmap":
		if err := need(1); err != nil {
			return err
		}
		return mmapCheck(args[1])
	case "bench":
		if err := need(2); err != nil {
			return err
		}
		n, err := strconv.Atoi(args[2])
		if err != nil {
			return err
		}
		return bench(args[1], n)
	case "setxattrhex":
		if err := need(3); err != nil {
			return err
		}
		v, err := hex.DecodeString(args[3])
		if err != nil {
			return err
		}
		return unix.Lsetxattr(args[1], args[2], v, 0)
	case "getxattrhex":
		if err := need(2); err != nil {
			return err
		}
		v, err := getXattr(args[1], args[2])
		if err != nil {
			return err
		}
		fmt.Println(hex.EncodeToString([]byte(v)))
		return nil
	case "fallocate":
		if err := need(4); err != nil {
			return err
		}
		var n [3]int64
		for i, a := range args[2:] {
			v, err := strconv.ParseInt(a, 0, 64)
			if err != nil {
				return fmt.Errorf("fallocate: %q: %w", a, err)
			}
			n[i] = v
		}
		return fallocate(args[1], uint32(n[0]), n[1], n[2])
	case "fifosignal":
		if err := need(1); err != nil {
			return err
		}
		return fifoOpenUnderSignal(args[1])
	case "utimens":
		if err := need(3); err != nil {
			return err
		}
		sec, err1 := strconv.ParseInt(args[2], 10, 64)
		nsec, err2 := strconv.ParseInt(args[3], 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("utimens: bad time %s %s", args[2], args[3])
		}
		return utimens(args[1], sec, nsec)
	}
	return fmt.Errorf("unknown command %q", args[0])
}
