// Package dockeraccept is the acceptance suite of Docker inside gvx: the
// real docker CLI on the host talks, through a unix socket rungv publishes,
// to a dockerd running in a sandbox built from package dockerimage's
// image. It covers the seed workflow (load images once into a golden
// ext4 volume, clone it per episode), docker run/exec/logs/build,
// Compose run inside the sandbox, privileged containers, and checks that
// the host's network, mounts and cgroups stay untouched.
//
// The suite needs the host docker CLI, the Docker image (built as root
// with debootstrap on first use, then cached; `make docker-image`), and
// the volume support of rungv for the golden-volume tests. Missing parts
// skip the tests, saying why. GVX_DOCKER_TESTS=0 skips the suite;
// GVX_DOCKER_TESTS=1 makes a failing image build fail it instead of
// skipping.
package dockeraccept
