// Command mkdockerimage builds gvx's Docker image (see package dockerimage)
// if it is not cached yet and prints its reference:
//
//	go run ./core/internal/dockerimage/mkdockerimage
//	oci:/root/.cache/gvx/dockerimage/<key>/oci:latest
//
// -q prints nothing but the reference; -json prints the build's details.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"z.gfire.dev/gvx/core/internal/dockerimage"
)

func main() {
	quiet := flag.Bool("q", false, "print only the image reference")
	asJSON := flag.Bool("json", false, "print the build as JSON: ref, layout, key, compose")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := dockerimage.Options{}
	if !*quiet {
		opts.Logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "mkdockerimage: "+format+"\n", args...)
		}
	}
	b, err := dockerimage.Build(ctx, dockerimage.Default(), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkdockerimage:", err)
		os.Exit(1)
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(map[string]any{
			"ref": b.Ref(), "layout": b.Layout, "key": b.Key,
			"compose": b.ComposeCommand(), "compose_error": b.ComposeError,
		})
		return
	}
	fmt.Println(b.Ref())
}
