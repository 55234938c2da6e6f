// Package dockerimage builds the Docker-in-gvx image: a Debian root
// filesystem with Docker's daemon, its command-line client, containerd,
// runc, iptables (nftables backend) and Compose, whose entrypoint mounts
// cgroups and starts dockerd. No registry is reachable from gvx's build
// machines, so the image is made from Debian packages:
//
//   - debootstrap (minbase) installs the packages from a Debian mirror —
//     the only network the build uses besides the Go module proxy;
//   - the Compose v2 CLI plugin is built from the Go module proxy
//     (github.com/docker/compose/v2) in a throw-away module outside the
//     repository; when that fails, Debian's docker-compose 1.29 is
//     installed instead;
//   - a small layer adds the entrypoint, /usr/local/sbin/gvx-dockerd.
//
// The result is an OCI layout cached under $GVX_CACHE/dockerimage
// (default ~/.cache/gvx/dockerimage) in a directory named by a digest of
// the recipe: it is rebuilt only when the recipe changes. Each layer is
// cached on its own, so changing the entrypoint does not run debootstrap
// again. Layers are written deterministically (sorted entries, numeric
// owners, modification times clamped to a fixed date, no caches or logs);
// what debootstrap installs still depends on the mirror's state on the day
// of the build.
//
// Building needs root (debootstrap), debootstrap itself and access to the
// mirror; Build says which is missing. `make docker-image` (or
// `go run ./core/internal/dockerimage/mkdockerimage`) builds the image and
// prints its reference.
//
// Running it: dockerd needs nftables and raw sockets in the Sentry, a
// writable /var/lib/docker on a filesystem overlay2 accepts (tmpfs or an
// ext4 volume), and a published port for its API:
//
//	rungv run --nftables --net-raw -p unix:/tmp/docker.sock:2375 oci:DIR:latest
//	DOCKER_HOST=unix:///tmp/docker.sock docker info
package dockerimage
