package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/internal/hostfile"
	"z.gfire.dev/gvx/core/spec"
)

// refuseSandboxFlags fails, for rungv run --spec, if any flag of fl (the
// sandbox's) or an argument was given: the spec describes the sandbox
// whole.
func refuseSandboxFlags(fl *pflag.FlagSet, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("--spec gives the image and the command (its image, entrypoint and cmd): drop %q from the command line", args)
	}
	var err error
	fl.VisitAll(func(f *pflag.Flag) {
		if err != nil || !f.Changed {
			return
		}
		field := "env" // --env-file
		for name, flag := range specFlags {
			if flag == "--"+f.Name {
				field = name
			}
		}
		err = fmt.Errorf("--%s describes the sandbox, which --spec gives whole: set %s in the spec instead, or drop --spec", f.Name, field)
	})
	return err
}

// maxSpecSize bounds a --spec's JSON. A spec is a few KiB; rungv reads it
// whole before anything checks it.
const maxSpecSize = 1 << 20

// readSpec reads the spec that --spec names: fd:N, an inherited descriptor
// (a pipe, or a file such as a sealed memfd, read from where it stands to
// its end), or the path of a regular file.
func readSpec(from string) (spec.Sandbox, error) {
	const want = "give fd:N (an inherited descriptor) or the path of a file that holds the spec's JSON"
	var f *os.File
	if fd, ok := strings.CutPrefix(from, "fd:"); ok {
		n, err := strconv.Atoi(fd)
		if err != nil || n < 3 {
			return spec.Sandbox{}, fmt.Errorf("--spec %.64s: want fd:N with N >= 3; %s", from, want)
		}
		var st unix.Stat_t
		if err := unix.Fstat(n, &st); err != nil {
			return spec.Sandbox{}, fmt.Errorf("--spec %s: descriptor %d: %w; pass it open, or %s", from, n, err, want)
		}
		if k := st.Mode & unix.S_IFMT; k != unix.S_IFIFO && k != unix.S_IFREG {
			return spec.Sandbox{}, fmt.Errorf("--spec %s: descriptor %d is neither a pipe nor a file; %s", from, n, want)
		}
		f = os.NewFile(uintptr(n), "spec")
	} else {
		if from == "" {
			return spec.Sandbox{}, fmt.Errorf("--spec \"\": %s", want)
		}
		var err error
		if f, err = hostfile.Open(from, os.O_RDONLY, hostfile.Regular); err != nil {
			return spec.Sandbox{}, fmt.Errorf("--spec %.64s: %w; %s", from, err, want)
		}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSpecSize+1))
	switch {
	case err != nil:
		return spec.Sandbox{}, fmt.Errorf("--spec %.64s: %w; %s", from, err, want)
	case len(b) > maxSpecSize:
		return spec.Sandbox{}, fmt.Errorf("--spec %.64s: more than %d KiB, and a sandbox spec is a few KiB: pass the spec's JSON alone", from, maxSpecSize>>10)
	}
	sp, err := decodeSpec(b)
	if err != nil {
		return sp, fmt.Errorf("--spec %.64s: %w", from, err)
	}
	return sp, nil
}

// decodeSpec decodes a spec's JSON, naming the field at fault as the spec
// does.
func decodeSpec(b []byte) (spec.Sandbox, error) {
	var sp spec.Sandbox
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(&sp)
	if err == nil && dec.Decode(new(json.RawMessage)) != io.EOF {
		return sp, errors.New("holds more than the spec's JSON object; give that object alone")
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case err == nil:
		return sp, nil
	case errors.Is(err, io.EOF):
		return sp, errors.New(`is empty; give the spec's JSON, e.g. {"image": "busybox", "keep_alive": true}`)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return sp, errors.New(`is not JSON: it ends inside the spec's object; give the whole object, e.g. {"image": "busybox", "keep_alive": true}`)
	case errors.As(err, &syntaxErr):
		return sp, fmt.Errorf("is not JSON (at byte %d: %v); give the spec's JSON, e.g. {\"image\": \"busybox\", \"keep_alive\": true}", syntaxErr.Offset, err)
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return sp, &spec.FieldError{Field: typeErr.Field, Problem: fmt.Sprintf("is a JSON %s; give %s", typeErr.Value, jsonWant(typeErr.Type))}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return sp, &spec.FieldError{Field: strings.Trim(name, `"`), Problem: "is not a field of a sandbox spec; check its name against core/spec's JSON names"}
	}
	return sp, fmt.Errorf("%w; give the spec's JSON as core/spec describes it", err)
}

// jsonWant says what JSON a Go type takes.
func jsonWant(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("a whole number that fits a %s", t.Kind())
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "an object"
}
