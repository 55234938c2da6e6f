package main

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/spec"
)

// fieldError is a problem with one field of a spec found after
// spec.Validate, by what this host gives or lets a sandbox do. It keeps
// the field's value apart from the problem so that the command line can
// show the value as the user typed it (flagNames); its Error names the
// field as the spec does.
type fieldError struct {
	field   string // named as spec.FieldError names it: "cpus", "ports[1].host_path"
	value   string // the field's value, as the spec holds it; "" when problem names it
	problem string // what is wrong, after the value, and what to give instead
	cause   error  // the error found, if any
}

// Error implements error.
func (e *fieldError) Error() string {
	return (&spec.FieldError{Field: e.field, Problem: join(e.value, e.problem)}).Error()
}

// Unwrap returns the error the problem was found as.
func (e *fieldError) Unwrap() error { return e.cause }

func join(value, problem string) string {
	if value == "" {
		return problem
	}
	return value + " " + problem
}

// fieldNames names the fields of a spec in errors and messages.
type fieldNames interface {
	// name names a field, for a message such as "NAME 30s reached".
	name(field string) string
	// explain restates err's problems with the spec's fields.
	explain(err error) error
}

// specNames names fields as the spec does: for rungv run --spec.
type specNames struct{}

func (specNames) name(field string) string { return "the spec's " + field }
func (specNames) explain(err error) error  { return err }

// flagNames names fields by the flags that set them (specFlags), with the
// values as typed where the spec holds them otherwise: "memory" -> "2t",
// "ports[1]" -> "8080:80". For rungv run without --spec.
type flagNames map[string]string

func (n flagNames) name(field string) string { return specFlags[field] }

// explain restates the spec's problems in err (*spec.FieldError,
// *fieldError, or a join of them) as problems with flags. Other errors
// are left as they are.
func (n flagNames) explain(err error) error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var errs []error
		for _, e := range joined.Unwrap() {
			errs = append(errs, n.explain(e))
		}
		return errors.Join(errs...)
	}
	switch e := err.(type) {
	case *spec.FieldError:
		problem := e.Problem
		if says, ok := flagSays[e.Field]; ok {
			problem = says
		}
		return errors.New(n.flag(e.Field) + " " + problem)
	case *fieldError:
		if given, ok := n[e.field]; ok {
			// The whole field, as typed: --memory 2t.
			return errors.New(n.flag(e.field) + " " + join(given, e.problem))
		}
		elem, sub, _ := strings.Cut(e.field, ".")
		if given, ok := n[elem]; ok && sub != "" {
			// The flag gave the element the field is part of:
			// --publish unix:/long/path:80: /long/path is ...
			return fmt.Errorf("%s %s: %s", n.flag(e.field), given, join(e.value, e.problem))
		}
		if e.value == "" {
			return fmt.Errorf("%s: %s", n.flag(e.field), e.problem)
		}
		return fmt.Errorf("%s %s %s", n.flag(e.field), e.value, e.problem)
	}
	return err
}

// flag names the flag that sets field ("ports[1].host_ip" -> "--publish").
func (n flagNames) flag(field string) string {
	name, _, _ := strings.Cut(field, "[")
	name, _, _ = strings.Cut(name, ".")
	if flag, ok := specFlags[name]; ok {
		return flag
	}
	return field
}

// checkWorkdir checks the spec's working directory against what Linux
// takes of a path; whether it can be a directory only the guest knows.
func checkWorkdir(dir string) error {
	value := fmt.Sprintf("%.64q", dir)
	switch {
	case dir == "":
		return nil
	case !path.IsAbs(dir):
		// As docker run words it.
		return &fieldError{"workdir", value, "is invalid, it needs to be an absolute path; give one such as /app", nil}
	case len(dir) >= unix.PathMax:
		return &fieldError{"workdir", value, fmt.Sprintf("is %d bytes, more than the %d Linux takes (PATH_MAX); give a shorter one", len(dir), unix.PathMax-1), nil}
	}
	for _, name := range strings.Split(dir, "/") {
		if len(name) > unix.NAME_MAX {
			return &fieldError{"workdir", value, fmt.Sprintf("has a name of %d bytes, more than the %d Linux takes (NAME_MAX); give a shorter one", len(name), unix.NAME_MAX), nil}
		}
	}
	return nil
}

// specFlags names the flag (or argument) of rungv run that sets each field
// of spec.Sandbox, by the field's JSON name: an error about a field names
// the flag on the command line. TestSpecFlagsCoverTheSpec holds it to the
// spec's fields.
var specFlags = map[string]string{
	"image":                     "IMAGE",
	"entrypoint":                "--entrypoint",
	"cmd":                       "COMMAND",
	"env":                       "--env",
	"workdir":                   "--workdir",
	"user":                      "--user",
	"hostname":                  "--hostname",
	"keep_alive":                "--keep-alive",
	"restore":                   "--restore",
	"platform":                  "--platform",
	"spin":                      "--spin",
	"network":                   "--network",
	"ports":                     "--publish",
	"allow_net":                 "--allow-net",
	"host_loopback":             "--host-loopback",
	"net_raw":                   "--net-raw",
	"nftables":                  "--nftables",
	"allow_packet_socket_write": "--allow-packet-socket-write",
	"allow_suid":                "--allow-suid",
	"mounts":                    "--mount",
	"memory":                    "--memory",
	"cpus":                      "--cpus",
	"cpuset":                    "--cpuset-cpus",
	"pids_limit":                "--pids-limit",
	"timeout":                   "--timeout",
}

// flagSays rewords, for the command line, spec.Validate's problems that
// name other fields of the spec: there they are flags and arguments.
var flagSays = map[string]string{
	"keep_alive":                "runs an idle init: give no COMMAND and no --entrypoint",
	"restore":                   "continues the snapshot's own init: give no COMMAND, --entrypoint, -t or --keep-alive",
	"allow_net":                 "restricts the NAT: add --network nat",
	"host_loopback":             "needs the NAT: add --network nat",
	"allow_packet_socket_write": "lets packet sockets send, and packet sockets need --net-raw: add it",
}
