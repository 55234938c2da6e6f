// Command stategen writes the methods that let gVisor's state package save
// and restore gvx's own kernel objects (filesystems, network stack
// creators): the objects a checkpoint of a sandbox reaches besides
// gVisor's, which carry generated methods of their own.
//
// It reads the Go files of the package in the current directory and, for
// every struct type whose doc comment has the line
//
//	+stateify savable
//
// writes StateTypeName, StateFields, StateSave and StateLoad, and registers
// the type with state.Register. A field tagged `state:"nosave"` is left out
// (its zero value is restored); `state:"wait"` is loaded with LoadWait, so
// it is complete before this object's afterLoad runs; `state:".(T)"` is
// saved as the T its owner's saveF() returns and restored through loadF(ctx,
// T), where F is the field's name with a capital first letter. A type that
// declares beforeSave() or afterLoad(context.Context) has them called.
//
// Use it through go:generate:
//
//	//go:generate go run z.gfire.dev/gvx/core/internal/stategen
//
// The output, savable_gen.go, is source that CI checks is current
// (TestGeneratedStateIsCurrent).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"z.gfire.dev/gvx/core/internal/stategen/gen"
)

func main() {
	out := flag.String("o", gen.OutputName, "the file to write, in the package's directory")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "stategen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	dir, err := os.Getwd()
	if err != nil {
		return err
	}
	src, err := gen.Generate(dir)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, out)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, src) {
		return nil
	}
	return os.WriteFile(path, src, 0o644)
}
