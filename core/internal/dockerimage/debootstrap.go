package dockerimage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// debootstrap installs r's Debian packages into dir (which must not exist)
// and prunes what a container image does not need. extra are more
// packages (the Compose fallback). The log goes to logPath.
func debootstrap(ctx context.Context, r *Recipe, extra []string, dir, logPath string) error {
	if os.Geteuid() != 0 {
		return errors.New("building the Docker image runs debootstrap, which needs root; run as root (or use an image built before: it is cached under $GVX_CACHE/dockerimage)")
	}
	bin, err := exec.LookPath("debootstrap")
	if err != nil {
		return errors.New("debootstrap is not installed: apt-get install debootstrap (`make docker-image` does this)")
	}
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	pkgs := append(append([]string(nil), r.Packages...), extra...)
	args := []string{"--variant=minbase", "--include=" + strings.Join(pkgs, ","), r.Suite, dir, r.mirror()}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Same locale and time zone on every machine.
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC", "DEBIAN_FRONTEND=noninteractive")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("debootstrap %s: %w; the end of its log (%s):\n%s\n(does %s answer? set GVX_DEBIAN_MIRROR to another mirror)",
			strings.Join(args, " "), err, logPath, logTail(logPath), r.mirror())
	}
	return prune(dir)
}

// pruned are removed from the installed tree: caches, logs, documentation
// and what debootstrap copies from the building host. Patterns are
// filepath.Glob patterns relative to the root.
var pruned = []string{
	"dev/*", // the sandbox provides /dev
	"proc/*",
	"sys/*",
	"run/*",
	"tmp/*",
	"var/tmp/*",
	"var/cache/apt/*.bin",
	"var/cache/apt/archives/*.deb",
	"var/cache/apt/archives/partial/*",
	"var/cache/debconf/*-old",
	"var/cache/ldconfig/aux-cache",
	"var/lib/apt/lists/*_*",
	"var/lib/dpkg/*-old",
	"var/log/*.log",
	"var/log/apt/*",
	"var/log/btmp",
	"var/log/faillog",
	"var/log/lastlog",
	"var/log/wtmp",
	"usr/share/man/*",
	"usr/share/info/*",
	"usr/share/lintian/*",
	"usr/share/doc/*/*", // copyright files are put back below
	"etc/hostname",
	"etc/machine-id",
}

// prune removes pruned paths from the tree at root, keeping Debian's
// copyright files, and empties resolv.conf (rungv writes one for NAT
// sandboxes; dockerd copies it into containers).
func prune(root string) error {
	copyrights := make(map[string][]byte)
	docs, _ := filepath.Glob(filepath.Join(root, "usr/share/doc/*/copyright"))
	for _, p := range docs {
		if data, err := os.ReadFile(p); err == nil {
			copyrights[p] = data
		}
	}
	for _, pattern := range pruned {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return err
		}
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return fmt.Errorf("pruning the Debian tree: %w", err)
			}
		}
	}
	for p, data := range copyrights {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	locales, _ := filepath.Glob(filepath.Join(root, "usr/share/locale/*"))
	for _, p := range locales {
		if filepath.Base(p) != "locale.alias" {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
		}
	}
	return os.WriteFile(filepath.Join(root, "etc/resolv.conf"), nil, 0o644)
}

// logTail returns the last lines of a log file.
func logTail(logPath string) string {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
