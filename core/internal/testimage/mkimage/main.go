// Command mkimage builds gvx's local images from Debian's busybox-static
// and prints where they are:
//
//	go run ./core/internal/testimage/mkimage           the 3-layer test image (cached)
//	go run ./core/internal/testimage/mkimage -default DIR [-docker-archive FILE]
//	                                                    the one-layer default image, as an OCI layout in DIR
//	                                                    (and as a `docker load` tarball)
package main

import (
	"flag"
	"fmt"
	"os"

	"z.gfire.dev/gvx/core/internal/testimage"
)

func main() {
	defaultDir := flag.String("default", "", "write the default busybox image as an OCI layout into this directory")
	archive := flag.String("docker-archive", "", "with -default: also write it as a docker archive tagged "+testimage.DefaultTag)
	flag.Parse()
	if *defaultDir != "" {
		if err := testimage.WriteDefault(*defaultDir, *archive); err != nil {
			fmt.Fprintln(os.Stderr, "mkimage:", err)
			os.Exit(1)
		}
		fmt.Println("oci:" + *defaultDir + ":latest")
		return
	}
	b, err := testimage.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
	fmt.Println(b.LayoutRef())
	fmt.Println(b.ArchiveRef())
}
