package dockerimage

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"os"
)

// recipeVersion changes whenever the build steps change in a way the
// Recipe's fields do not show (pruning, layer format, image config).
const recipeVersion = "1"

// Recipe is what the image is made of. Its digest names the cached build.
type Recipe struct {
	// Suite is the Debian release debootstrap installs.
	Suite string
	// Packages are installed with debootstrap --variant=minbase
	// --include; their dependencies come along.
	Packages []string
	// ComposeVersion is the version of github.com/docker/compose/v2 built
	// as the Compose CLI plugin.
	ComposeVersion string
	// ComposeFallback are the Debian packages installed instead when the
	// plugin cannot be built.
	ComposeFallback []string
	// Entrypoint is the image's entrypoint script.
	Entrypoint string
	// SnapshotHook is the script that carries dockerd's bridges and
	// netfilter rules through a gvx snapshot (image.SnapshotHookLabel).
	SnapshotHook string
	// Needs is the image's image.NeedsLabel: the sandbox features
	// `rungv run IMAGE` turns on for it.
	Needs string
}

//go:embed gvx-dockerd.sh
var entrypointScript string

//go:embed gvx-snapshot.sh
var snapshotHookScript string

// EntrypointPath is where the entrypoint script is installed.
const EntrypointPath = "/usr/local/sbin/gvx-dockerd"

// SnapshotHookPath is where the snapshot hook is installed.
const SnapshotHookPath = "/usr/local/sbin/gvx-snapshot"

// DockerPort is the TCP port dockerd listens on inside the sandbox; publish
// it with `rungv run -p unix:HOSTPATH:2375`.
const DockerPort = 2375

// Default is the recipe `make docker-image` builds.
func Default() *Recipe {
	return &Recipe{
		Suite: "bookworm",
		// docker.io holds dockerd and the CLI, and depends on containerd,
		// runc, iptables (whose default in bookworm is the nftables
		// backend, the only one gVisor can run dockerd's rules on) and
		// tini (docker-init, the entrypoint's init). iproute2's ip
		// re-creates dockerd's bridges after a restore (SnapshotHook).
		Packages:        []string{"docker.io", "containerd", "runc", "iptables", "tini", "ca-certificates", "iproute2"},
		ComposeVersion:  "v2.40.3",
		ComposeFallback: []string{"docker-compose"},
		Entrypoint:      entrypointScript,
		SnapshotHook:    snapshotHookScript,
		// dockerd with its defaults programs its bridge network with
		// iptables-nft, and its containers expect raw sockets (ping).
		Needs: "nftables,net-raw",
	}
}

// defaultMirror is the Debian mirror debootstrap uses unless
// GVX_DEBIAN_MIRROR names another. The mirror is not part of the recipe:
// any mirror serves the same packages.
const defaultMirror = "http://deb.debian.org/debian"

func (r *Recipe) mirror() string {
	if m := os.Getenv("GVX_DEBIAN_MIRROR"); m != "" {
		return m
	}
	return defaultMirror
}

// digest hashes v with the recipe version into a short hex name.
func digest(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs of strings always marshal
	}
	sum := sha256.Sum256(append([]byte("gvx-dockerimage-r"+recipeVersion+"\n"), data...))
	return hex.EncodeToString(sum[:8])
}

// Key names the whole image's build.
func (r *Recipe) Key() string { return digest(r) }

// debianKey names the Debian layer's build: only the suite and the
// packages go into it (extra are the Compose fallback's packages, if
// used).
func (r *Recipe) debianKey(extra []string) string {
	return "debian-" + digest(struct {
		Suite    string
		Packages []string
		Extra    []string
	}{r.Suite, r.Packages, extra})
}

// composeKey names the Compose plugin's build.
func (r *Recipe) composeKey() string { return "compose-" + r.ComposeVersion }
