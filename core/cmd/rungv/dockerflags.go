package main

import (
	"fmt"

	"github.com/spf13/pflag"
)

// dockerOnlyFlag is a `docker run` flag that rungv does not take, with what
// to do instead. Users come from docker; "unknown flag: --privileged" leaves
// them guessing whether gvx can do what they wanted at all.
type dockerOnlyFlag struct {
	name, shorthand string
	takesValue      bool
	instead         string
}

var dockerOnlyFlags = []dockerOnlyFlag{
	{"volume", "v", true, "a sandbox never sees host directories; attach an ext4 volume with " +
		"--mount type=volume,src=FILE.ext4,dst=/PATH, or copy a directory in with --copy HOSTDIR:GUESTDIR " +
		"(or the SDK's Upload, Python's upload)"},
	{"privileged", "", false, "a sandbox needs none: guest root holds every capability inside gVisor, which is " +
		"what dockerd and `docker run --privileged` inside the sandbox use; the host gives the sandbox nothing"},
	{"cap-add", "", true, "guest root already holds every capability inside the sandbox"},
	{"security-opt", "", true, "a sandbox's security is gVisor and rungv's own lockdown, with nothing to set"},
	{"detach", "d", false, "rungv runs in the foreground as the sandbox's one host process: background it " +
		"with the shell (&), or start sandboxes from the Go or Python SDK and keep their handles"},
	{"name", "", true, "sandboxes have no names: keep the rungv process or the SDK's handle, and reach a running " +
		"sandbox through --control unix:PATH"},
	{"restart", "", true, "a sandbox is one process; start a new one from your code when it ends"},
	{"gpus", "", true, "sandboxes have no GPUs"},
	{"device", "", true, "a sandbox has its own /dev and never sees host devices"},
}

// addDockerOnlyFlags registers dockerOnlyFlags, hidden, so that using one
// reaches refuseDockerOnlyFlags instead of pflag's "unknown flag".
func addDockerOnlyFlags(fl *pflag.FlagSet) {
	for _, f := range dockerOnlyFlags {
		if f.takesValue {
			fl.StringArrayP(f.name, f.shorthand, nil, "")
		} else {
			fl.BoolP(f.name, f.shorthand, false, "")
		}
		fl.MarkHidden(f.name)
	}
}

// refuseDockerOnlyFlags fails for the first docker-only flag given.
func refuseDockerOnlyFlags(fl *pflag.FlagSet) error {
	for _, f := range dockerOnlyFlags {
		if fl.Changed(f.name) {
			return fmt.Errorf("--%s is a docker run flag that rungv does not take: %s", f.name, f.instead)
		}
	}
	return nil
}
