package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/spec"
)

func TestResolveCommand(t *testing.T) {
	cfg := image.Config{Entrypoint: []string{"/entry"}, Cmd: []string{"serve", "--port=1"}, Env: []string{"PATH=/bin", "A=image"}, WorkingDir: "/app", User: "app"}
	cases := []struct {
		name string
		args []string // flags, the image, the command
		want []string
	}{
		{"image defaults", []string{"img"}, []string{"/entry", "serve", "--port=1"}},
		{"args replace Cmd", []string{"img", "check"}, []string{"/entry", "check"}},
		{"--entrypoint drops Cmd", []string{"--entrypoint", "/bin/sh", "img"}, []string{"/bin/sh"}},
		{"--entrypoint with args", []string{"--entrypoint", "/bin/sh", "img", "-c", "true"}, []string{"/bin/sh", "-c", "true"}},
		{"empty --entrypoint", []string{"--entrypoint", "", "img", "ls"}, []string{"ls"}},
	}
	for _, c := range cases {
		sp, _, err := parseRun(t, c.args...)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := resolveCommand(cfg, &sp)
		if err != nil || !reflect.DeepEqual(ps.Argv, c.want) {
			t.Errorf("%s: argv %q, %v; want %q", c.name, ps.Argv, err, c.want)
		}
	}
	// An entrypoint of several words, as a spec gives it.
	ep := []string{"/bin/sh", "-c"}
	if ps, err := resolveCommand(cfg, &spec.Sandbox{Entrypoint: &ep, Cmd: []string{"true"}}); err != nil || !reflect.DeepEqual(ps.Argv, []string{"/bin/sh", "-c", "true"}) {
		t.Errorf("entrypoint [/bin/sh -c], cmd [true]: argv %q, %v", ps.Argv, err)
	}
	t.Setenv("FROM_HOST", "h")
	envFile := filepath.Join(t.TempDir(), "env")
	os.WriteFile(envFile, []byte("# comment\n\nB=file\nA=file\nFROM_HOST\nUNSET_ON_HOST\n"), 0o644)
	sp, _, err := parseRun(t, "-e", "A=flag", "-e", "C", "--env-file", envFile, "-w", "/w", "-u", "1:2", "img")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := resolveCommand(cfg, &sp)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/bin", "A=flag", "B=file", "FROM_HOST=h"}; !reflect.DeepEqual(ps.Env, want) {
		t.Errorf("env %q, want %q", ps.Env, want)
	}
	if ps.Cwd != "/w" || ps.User != "1:2" {
		t.Errorf("cwd/user: %+v", ps)
	}
	if ps, _ = resolveCommand(cfg, &spec.Sandbox{}); ps.Cwd != "/app" || ps.User != "app" {
		t.Errorf("image cwd/user not used: %+v", ps)
	}
	// Without a command, the defaults execs take are still resolved.
	ps, err = resolveCommand(image.Config{Env: []string{"A=1"}, WorkingDir: "/app"}, &sp)
	if !errors.Is(err, errNoCommand) || ps.Cwd != "/w" || len(ps.Env) != 3 || ps.Env[0] != "A=flag" {
		t.Errorf("no command: %+v, %v; want errNoCommand and the defaults", ps, err)
	}
	_, err = resolveCommand(image.Config{Cmd: []string{"x"}, WorkingDir: "rel"}, &spec.Sandbox{})
	if err = (flagNames{}).explain(err); err == nil || !strings.Contains(err.Error(), "--workdir: the image's WorkingDir") {
		t.Errorf("relative image WorkingDir: %v", err)
	}
}

// TestProcessFlags checks that each bad process flag is refused with the
// flag named and what to give.
func TestProcessFlags(t *testing.T) {
	dir := t.TempDir()
	badName := filepath.Join(dir, "bad-name")
	os.WriteFile(badName, []byte("BAD NAME=1\n"), 0o644)
	noName := filepath.Join(dir, "no-name")
	os.WriteFile(noName, []byte("A=1\n=2\n"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--env", "=x"}, `--env "=x": invalid environment variable: it has no name; write NAME=VALUE`},
		{[]string{"--env", ""}, `--env "": invalid environment variable`},
		{[]string{"--env", "A B=1"}, `contains whitespace`},
		{[]string{"--env-file", ""}, `--env-file "": give the path`},
		{[]string{"--env-file", filepath.Join(dir, "missing")}, `the file does not exist; give a file`},
		{[]string{"--env-file", dir}, `is a directory; only a regular file`},
		{[]string{"--env-file", badName}, badName + `:1: invalid environment variable: the name "BAD NAME" contains whitespace`},
		{[]string{"--env-file", noName}, noName + `:2: invalid environment variable: it has no name`},
		{[]string{"--workdir", "rel/dir"}, `--workdir "rel/dir" is invalid, it needs to be an absolute path; give one such as /app`},
		{[]string{"--workdir", "/" + strings.Repeat("w", 5000)}, `more than the 4095 Linux takes (PATH_MAX)`},
		{[]string{"--workdir", "/a/" + strings.Repeat("w", 256)}, `a name of 256 bytes, more than the 255 Linux takes (NAME_MAX)`},
		{[]string{"--user", "::"}, `--user: user "::" has no name or uid; give name|uid[:group|gid]`},
		{[]string{"--user", "a:"}, `has an empty group`},
		{[]string{"--user", "a:b:c"}, `--user: user "a:b:c" has more than one ':'`},
		{[]string{"--user", "4294967296"}, `--user: user "4294967296": uids and gids must be in range 0-2147483647`},
		{[]string{"--user", "0:99999999999"}, `uids and gids must be in range`},
	}
	for _, c := range cases {
		if err := cliError(t, append(c.args, "img")...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want an error with %q", c.args, err, c.want)
		}
	}
	for _, good := range [][]string{{"--user", "nobody"}, {"--user", "1000:1000"}, {"--user", "app:staff"}, {"--workdir", "/a/b"}, {"-e", "A=", "-e", "A=b=c", "-e", "UNSET_ON_HOST"}} {
		if err := cliError(t, append(good, "img")...); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
}

// TestSizeGrammar reads sizes as core/testdata/sizes.json says, the cases
// Python's parse_size is held to as well.
func TestSizeGrammar(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/sizes.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases struct {
		Valid   [][2]json.RawMessage `json:"valid"`
		Invalid [][2]string          `json:"invalid"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatalf("sizes.json: %v", err)
	}
	if len(cases.Valid) == 0 || len(cases.Invalid) == 0 {
		t.Fatal("sizes.json holds no cases")
	}
	for _, c := range cases.Valid {
		var in string
		var want uint64
		if err := json.Unmarshal(c[0], &in); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(c[1], &want); err != nil {
			t.Fatal(err)
		}
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, c := range cases.Invalid {
		if got, err := parseBytes(c[0]); err == nil || !strings.Contains(err.Error(), c[1]) {
			t.Errorf("parseBytes(%q) = %d, %v; want an error saying %q", c[0], got, err, c[1])
		}
	}
	if got, err := parseBytes(""); err != nil || got != 0 {
		t.Errorf(`parseBytes("") = %d, %v; want 0 (unset)`, got, err)
	}
}
