package main

// The bad-flag part of the reliability battery (issue 17): every flag of
// every rungv command, found by walking the command tree, given bad values
// by its kind. Each is refused promptly, with one line that names the flag
// and says what to give: no usage dump, no Go trace, no sandbox.

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"z.gfire.dev/gvx/internal/battery"
)

// badByType are the bad values every flag of a pflag value type gets.
var badByType = map[string][]string{
	"bool":     {"maybe", "", "2"},
	"int":      {"x", "", "1e30", "NaN", "99999999999999999999"},
	"float64":  {"x", "", "NaN", "Inf", "-1", "1e30", "30000"},
	"duration": {"x", "", "-1s", "1e30h"},
}

// flagFixture is what a bad-value case of one flag needs: the files it
// names (made in dir), and the command line around the flag.
type flagFixture struct {
	dir, image, fifo, file, missing, long string
}

// badValues lists, for the flags whose value is free text, the malformed
// values each gets, keyed "COMMAND --FLAG". A flag of a type in badByType
// gets those as well. The test fails for a flag that gets no value, so a
// flag added later must be given some here.
func badValues(fx flagFixture) map[string][]string {
	longSock := "unix:/tmp/" + strings.Repeat("x", 110) + ".sock"
	return map[string][]string{
		"rungv --cache":                 {fx.file, fx.fifo, "/proc/self/no-such-dir"},
		"pull --platform":               {"bogus", "windows/amd64", "/", "linux/", fx.long},
		"images --format":               {"yaml", "{{.ID}}", fx.long},
		"checkpoint --control":          {"tcp:127.0.0.1:1", "unix:", longSock, "unix:" + fx.missing, "unix:" + fx.file},
		"checkpoint --output":           {""},
		"volume create --size":          {"12QB", "-1g", "0", "", "1e30", "NaN", "1k"},
		"volume flatten --golden":       {fx.missing, fx.dir, fx.fifo, fx.file},
		"run --allow-net":               {"10.0.0.0/8:70000", "x", "", "10.0.0.0/33", "::/129", "10.0.0.1/8:0"},
		"run --control":                 {"tcp:127.0.0.1:1", "unix:", longSock, "fd:x", "fd:-1", "fd:99999", "unix:" + fx.missing + "/s.sock", fx.long},
		"run --exit-status-fd":          {"-1", "1", "99999", "5000000000"},
		"run --copy":                    {fx.missing + ":/w", fx.file + ":/w", fx.dir, fx.dir + ":relative", ":/w", fx.dir + ":/w", fx.long},
		"run --cpuset-cpus":             {"3-1", "x", "0-99999", ",", "5000", "-1", fx.long},
		"run --entrypoint":              {"/no/such/entrypoint"},
		"run --env":                     {"=x", "", "="},
		"run --env-file":                {fx.missing, fx.dir, fx.fifo, ""},
		"run --hostname":                {strings.Repeat("h", 300), "bad host name!", "-leading-dash"},
		"run --memory":                  {"12QB", "-1g", "nan", "1e30", "1k", "2t"},
		"run --mount":                   {"x", "", "type=bind,src=/,dst=/x", "type=volume,src=,dst=/x", "type=volume,src=" + fx.fifo + ",dst=/d", "type=volume,src=" + fx.dir + ",dst=/d", "type=volume,src=" + fx.dir + "/v.ext4,dst=relative", "type=volume,src=" + fx.dir + "/v.ext4"},
		"run --network":                 {"host", "bogus", "bridge"},
		"run --platform":                {"bogus", "kvm2"},
		"run --publish":                 {"99999:80", "8080:0", "x", "", longSock + ":80", "unix::80", "127.0.0.1:80:80/sctp"},
		"run --restore":                 {fx.missing, fx.dir, fx.fifo, fx.file},
		"run --spec":                    {fx.missing, fx.dir, fx.fifo, fx.file, "", "fd:x", "fd:1", "fd:99999", fx.long},
		"run --user":                    {"::", "a:b:c", "4294967296", "nosuchuser", "0:nosuchgroup", fx.long},
		"run --workdir":                 {"relative", "/" + strings.Repeat("w", 5000)},
		"run --dns-upstream":            {"x", "", "127.0.0.1:99999"},
		"run --volume":                  {"/:/host"},
		"run --cap-add":                 {"ALL"},
		"run --security-opt":            {"seccomp=unconfined"},
		"run --name":                    {"box"},
		"run --restart":                 {"always"},
		"run --gpus":                    {"all"},
		"run --device":                  {"/dev/kvm"},
		"run --pids-limit":              {"-2"},
		"run --privileged":              {"true"},
		"run --detach":                  {"true"},
		"run --debug-lockdown-selftest": {"maybe"},
	}
}

// guestChecked are the flags whose values only the guest can judge, with
// the exit code docker run gives for a bad one: the image decides what
// /no/such/entrypoint is.
var guestChecked = map[string]int{"run --entrypoint": 127}

// flagContext is what goes before (the command's other required flags) and
// after (its arguments) the flag under test.
func flagContext(fx flagFixture, path, flag string) (before, after []string) {
	switch path {
	case "pull":
		return nil, []string{fx.image}
	case "rmi":
		return nil, []string{"nothing"}
	case "prune":
		return nil, nil
	case "checkpoint":
		before = []string{"--control", "unix:" + fx.missing, "-o", filepath.Join(fx.dir, "out.snap")}
		return before, nil
	case "volume create", "volume check":
		return nil, []string{filepath.Join(fx.dir, "new.ext4")}
	case "volume clone":
		return nil, []string{fx.missing, filepath.Join(fx.dir, "episode.ext4")}
	case "volume flatten":
		return nil, []string{fx.missing, filepath.Join(fx.dir, "out.ext4")}
	case "run":
		if flag == "spec" {
			return nil, nil // the spec gives the image and the command
		}
		if flag == "allow-net" || flag == "dns-upstream" {
			before = []string{"--network", "nat"}
		}
		return before, []string{fx.image, "true"}
	}
	return nil, nil
}

// commandFlags walks the command tree and returns every flag of every
// command a user runs, keyed "COMMAND --FLAG" (the root's as "rungv --F").
func commandFlags() map[string]*pflag.Flag {
	out := map[string]*pflag.Flag{}
	var visit func(c *cobra.Command)
	visit = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		path := strings.TrimPrefix(c.CommandPath(), "rungv ")
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" {
				out[path+" --"+f.Name] = f
			}
		})
		if !c.HasParent() {
			c.PersistentFlags().VisitAll(func(f *pflag.Flag) { out["rungv --"+f.Name] = f })
		}
		for _, sub := range c.Commands() {
			visit(sub)
		}
	}
	visit(newRootCommand())
	return out
}

// TestBatteryBadFlags gives every flag of every command bad values: each
// run ends at once, non-zero, with a clear one-line error that names the
// flag, and leaves nothing in its home, temporary or working directory.
func TestBatteryBadFlags(t *testing.T) {
	dir := t.TempDir()
	fx := flagFixture{
		dir:     dir,
		image:   testImage(t),
		fifo:    filepath.Join(dir, "fifo"),
		file:    filepath.Join(dir, "file"),
		missing: filepath.Join(dir, "missing"),
		// The kernel takes one argument of at most 128 KiB (MAX_ARG_STRLEN).
		long: strings.Repeat("L", battery.Count(4<<10, 100<<10)),
	}
	mkfifo(t, fx.fifo)
	if err := os.WriteFile(fx.file, []byte("not what the flag wants\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	sc := newScratch(t)
	if r := sc.run("--cache", cache, "pull", "-q", fx.image); r.code != 0 {
		t.Fatalf("pulling the test image: %s", r.stderr)
	}
	sc.leftovers()
	bad := badValues(fx)
	flags := commandFlags()
	var keys []string
	for k := range flags {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	var c tally
	var failures, uncovered []string
	used := map[string]bool{}
	before := treeListing(dir)
	for _, key := range keys {
		f := flags[key]
		values := append(append([]string(nil), badByType[f.Value.Type()]...), bad[key]...)
		used[key] = true
		if len(values) == 0 {
			uncovered = append(uncovered, fmt.Sprintf("%s (%s)", key, f.Value.Type()))
			continue
		}
		path, _, _ := strings.Cut(key, " --")
		var cmdPath []string
		if path != "rungv" {
			cmdPath = strings.Fields(path)
		}
		for _, v := range values {
			name := fmt.Sprintf("%s=%q", key, truncate(v, 40))
			args := []string{"--cache", cache}
			var flagArgs []string
			if path == "rungv" {
				args = []string{"--" + f.Name + "=" + v}
				cmdPath = []string{"images"}
			} else {
				flagArgs = []string{"--" + f.Name + "=" + v}
			}
			pre, post := flagContext(fx, path, f.Name)
			args = append(args, cmdPath...)
			args = append(args, pre...)
			args = append(args, flagArgs...)
			args = append(args, post...)
			r := sc.run(args...)
			want := []string{"--" + f.Name}
			if f.Shorthand != "" && !strings.Contains(r.stderr, "--"+f.Name) {
				want = []string{"-" + f.Shorthand}
			}
			outcome, detail := classify(r, want)
			if code, ok := guestChecked[key]; ok && r.code == code && outcome == outUnclear {
				outcome, detail = outClear, ""
			}
			if outcome == outAccepted {
				outcome, detail = outUnclear, fmt.Sprintf("accepted (stdout %q, stderr %q); want an error naming the flag", truncate(r.stdout, 200), truncate(r.stderr, 200))
			}
			effects := sc.leftovers()
			c.add(name, outcome, r.took, len(effects))
			t.Logf("%-70s %-13s %5d ms  %s", name, outcome, r.took.Milliseconds(), truncate(firstLine(r.stderr), 200))
			if outcome != outClear {
				failures = append(failures, fmt.Sprintf("%s: %s: %s", name, outcome, detail))
			}
			if len(effects) > 0 {
				failures = append(failures, fmt.Sprintf("%s: left %q", name, effects))
			}
		}
	}
	if after := treeListing(dir); strings.Join(before, "\n") != strings.Join(after, "\n") {
		failures = append(failures, "the fixtures' directory changed:\n"+strings.Join(after, "\n"))
		c.effects++
	}
	for k := range bad {
		if !used[k] {
			failures = append(failures, fmt.Sprintf("badValues lists %s, which no command has", k))
		}
	}
	c.table(t, fmt.Sprintf("Bad flag values: %d flags of every rungv command, found by walking the command tree", len(keys)))
	if len(uncovered) > 0 {
		t.Errorf("these flags get no bad value; add them to badValues:\n%s", strings.Join(uncovered, "\n"))
	}
	if len(failures) > 0 {
		t.Errorf("%d of %d cases failed:\n%s", len(failures), c.tried, strings.Join(failures, "\n"))
	}
}
