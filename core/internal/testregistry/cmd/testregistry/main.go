// Command testregistry serves the in-process test registry for tests that
// are not Go tests (python/tests): it pushes OCI layouts to it, prints its
// host:port on a line, and serves until its stdin closes, so that it ends
// with the test that started it.
//
//	go run ./core/internal/testregistry/cmd/testregistry -push DIR=gvx/docker:latest
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"z.gfire.dev/gvx/core/internal/testregistry"
)

// pushes collects -push LAYOUT=REPO:TAG.
type pushes []string

func (p *pushes) String() string     { return strings.Join(*p, ",") }
func (p *pushes) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	var push pushes
	flag.Var(&push, "push", "push the OCI layout `DIR=REPO:TAG` (repeatable)")
	flag.Parse()
	host, stop, err := testregistry.Start("127.0.0.1")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testregistry:", err)
		os.Exit(1)
	}
	defer stop()
	for _, p := range push {
		dir, ref, ok := strings.Cut(p, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "testregistry: -push %q: want DIR=REPO:TAG\n", p)
			os.Exit(2)
		}
		if err := testregistry.Push(dir, host+"/"+ref); err != nil {
			fmt.Fprintf(os.Stderr, "testregistry: pushing %s: %v\n", dir, err)
			os.Exit(1)
		}
	}
	fmt.Println(host)
	io.Copy(io.Discard, os.Stdin)
}
