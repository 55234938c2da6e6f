"""Docker inside gvx: dockerd with its defaults (overlay2, bridge network,
iptables) in a sandbox of the Docker-in-gvx image (``make docker-image``
prints its reference), its state on a golden volume cloned per episode.

>>> golden = gvx.docker.golden(DOCKER_IMAGE, archives=["app.tar"], volume="golden.ext4")
>>> env = gvx.GvxEnv(DOCKER_IMAGE, golden=golden, setup=gvx.docker.SETUP,
...                  warm=2, **gvx.docker.SANDBOX_OPTIONS)
>>> obs, info = env.reset()          # dockerd is up, app's images are there
>>> env.step("docker run --rm app pytest -q")

A dockerd takes about 1.6 s to start (it runs ~70 ``iptables`` commands, each a
fork and exec inside gVisor), so ``warm=2`` keeps two episodes prepared: resets
stay hand-overs even when episodes are shorter than a dockerd start. Or skip the
start altogether: :func:`snapshot` saves a ready dockerd once, and episodes
restore it in about 0.3 s:

>>> ready = gvx.docker.snapshot(DOCKER_IMAGE, golden=golden, snapshot="ready.snap", volume="ready.ext4")
>>> env = gvx.GvxEnv(DOCKER_IMAGE, golden=ready, restore="ready.snap", **gvx.docker.SANDBOX_OPTIONS)

Where the image comes from: :func:`image` returns ``$GVX_DOCKER_IMAGE`` (a registry
reference the image was pushed to, ``oci:DIR:latest`` or ``docker-archive:FILE``),
else the newest ``make docker-image`` build under ``~/.cache/gvx/dockerimage``
(``$GVX_CACHE/dockerimage``). A pip install carries no Docker image and cannot
build one (debootstrap needs root and a Debian mirror): build it once where a gvx
checkout can, push it to a registry, and point ``GVX_DOCKER_IMAGE`` at it.

A sandbox drives its dockerd like any other process: :data:`SETUP` starts it in
the background and waits until it answers; :data:`STOP` ends it gracefully (a
golden volume is then consistent). The guest's docker CLI needs nothing else;
from the host, publish its socket with ``ports=["unix:/path/docker.sock:2375"]``
and set ``DOCKER_HOST=unix:///path/docker.sock``.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, Union

from . import errors, golden as _golden
from .sandbox import Mount, Sandbox
from .volumes import Volume

PathLike = Union[str, "os.PathLike[str]"]

IMAGE_ENV = "GVX_DOCKER_IMAGE"
"""The environment variable :func:`image` reads first."""


def image() -> str:
    """Returns the reference of the Docker-in-gvx image: ``$GVX_DOCKER_IMAGE`` if set,
    else the newest complete ``make docker-image`` build in the cache
    (``$GVX_CACHE/dockerimage``, default ``~/.cache/gvx/dockerimage``), as
    ``oci:DIR:latest``. Raises :class:`gvx.NotFoundError` saying how to get one.

    >>> IMAGE = gvx.docker.image()   # e.g. registry.example.com/gvx/docker:1
    >>> golden = gvx.docker.golden(IMAGE, archives=["app.tar"], volume="golden.ext4")
    """
    ref = os.environ.get(IMAGE_ENV, "").strip()
    if ref:
        return ref
    cache = os.environ.get("GVX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gvx")
    root = Path(cache) / "dockerimage"
    # A build is complete once its build.json is written, last.
    builds = sorted(root.glob("*/build.json"), key=lambda p: p.stat().st_mtime) if root.is_dir() else []
    if builds:
        return f"oci:{builds[-1].parent / 'oci'}:latest"
    raise errors.NotFoundError(
        f"no Docker-in-gvx image: ${IMAGE_ENV} is not set and {root} holds no build. A pip install carries "
        "none and cannot build one; either set "
        f"{IMAGE_ENV} to a registry reference it was pushed to (build it once with `make docker-image` in a "
        "gvx checkout, as root with debootstrap, then e.g. `skopeo copy oci:DIR:latest "
        "docker://REGISTRY/gvx/docker:TAG`), or run `make docker-image` on this machine"
    )


SANDBOX_OPTIONS: Mapping[str, Any] = {"nftables": True, "net_raw": True}
"""Sandbox options dockerd needs: gVisor's nftables (Docker programs its bridge
network with iptables-nft) and raw sockets. Pass them as ``**gvx.docker.SANDBOX_OPTIONS``."""

LOG = "/var/log/gvx-dockerd.log"
"""Where :data:`START` sends dockerd's output inside the sandbox."""

START = f"gvx-dockerd >{LOG} 2>&1 & echo $! >/run/gvx-dockerd.pid"
"""Starts the image's entrypoint (cgroups, then dockerd) in the background."""

WAIT = (
    "end=$(($(date +%s) + 600)); until docker version >/dev/null 2>&1; do "
    'if [ "$(date +%s)" -ge "$end" ] || ! kill -0 "$(cat /run/gvx-dockerd.pid)" 2>/dev/null; then '
    f'echo "dockerd is not answering (a sandbox for dockerd needs **gvx.docker.SANDBOX_OPTIONS); the end of {LOG}:" >&2; '
    f"tail -n 20 {LOG} >&2; exit 1; fi; "
    "sleep 0.02; done"
)
"""Waits until dockerd answers; fails at once with dockerd's log when dockerd
exits, and after ten minutes if it never answers: on a host busy with many
sandboxes a dockerd can take minutes to start."""

SETUP: tuple[str, ...] = (START, WAIT)
"""Commands that give a fresh sandbox a ready dockerd: ``GvxEnv(setup=gvx.docker.SETUP)``."""

STOP = (
    "pid=$(cat /var/run/docker.pid 2>/dev/null) || exit 0; "
    "kill -TERM $pid; while kill -0 $pid 2>/dev/null; do sleep 0.05; done; "
    "pid=$(cat /var/run/docker/containerd/containerd.pid 2>/dev/null) || exit 0; "
    "while kill -0 $pid 2>/dev/null; do sleep 0.05; done"
)
"""Stops dockerd gracefully and waits until it and its containerd (which the
image's entrypoint stops once dockerd has exited) are gone."""

_NOTE_CUSTOM_NETWORKS = "docker network ls --filter type=custom -q >/run/gvx-custom-networks"
_FORGET_DEFAULT_NETWORKS = (
    "if [ ! -s /run/gvx-custom-networks ]; then rm -f /var/lib/docker/network/files/local-kv.db; fi"
)
# dockerd deletes its default bridge network and makes it anew at every start.
# In an episode's fresh network stack the deletion has nothing to remove but
# still runs about 30 iptables commands (0.25–0.4 s here). A golden
# whose seed made no network of its own (the usual case) therefore drops
# dockerd's network database after dockerd stopped: every episode's dockerd
# then starts its networks as on a first start. Custom networks keep it.


def start(sb: Sandbox, *, timeout: float = 600.0) -> None:
    """Starts dockerd in ``sb`` and returns once it answers.

    The sandbox needs :data:`SANDBOX_OPTIONS`; an image without ``gvx-dockerd``
    is not the Docker-in-gvx image.
    """
    for cmd in SETUP:
        result = sb.exec(cmd, timeout=timeout)
        if not result.ok:
            raise errors.ExecError(result, cmd)


def golden(
    image: str,
    *,
    volume: Union[PathLike, Volume],
    archives: Sequence[PathLike] = (),
    setup: Sequence[str] = (),
    size: Union[int, str] = "16g",
    progress: Union[bool, Callable[[str], None]] = True,
    **sandbox_options: Any,
) -> Volume:
    """Builds a golden ``/var/lib/docker``: a seed sandbox starts dockerd,
    ``docker load``s each of ``archives`` (``docker save`` tarballs on the host),
    runs ``setup`` (e.g. ``docker build``), stops dockerd gracefully and closes
    the volume, which then passes ``e2fsck``. Unless ``setup`` made networks of its
    own, dockerd's network database is left out, so that episodes' dockerd skip
    taking down the seed's bridge network (about 30 ``iptables`` commands).

    Episodes mount clones of it (``GvxEnv(golden=...)``) and see the images at once.
    """
    uploads: dict[str, Path] = {}
    for i, archive in enumerate(archives):
        p = Path(archive)
        if not p.is_file():
            raise errors.InvalidArgumentError(f"archive {str(p)!r} is not a file: give `docker save` tarballs")
        uploads[f"/tmp/gvx-archive-{i}.tar"] = p
    loads = [f"docker load -q -i {shlex.quote(guest)} && rm {shlex.quote(guest)}" for guest in uploads]
    options = {**SANDBOX_OPTIONS, **sandbox_options}
    return _golden.build(
        image,
        setup=[*SETUP, *loads, *setup, _NOTE_CUSTOM_NETWORKS, STOP, _FORGET_DEFAULT_NETWORKS],
        volume=volume,
        path="/var/lib/docker",
        size=size,
        progress=progress,
        uploads=uploads,
        **options,
    )


def snapshot(
    image: str,
    *,
    golden: Volume,
    snapshot: PathLike,
    volume: PathLike,
    **sandbox_options: Any,
) -> Volume:
    """Snapshots a ready dockerd: boots a sandbox on a clone of ``golden``, starts
    dockerd, and once it answers checkpoints the sandbox into the file ``snapshot``
    (stopping it) and writes its volume, flattened, to ``volume``, which it returns.

    Each episode then restores the snapshot on its own clone of that volume, its
    dockerd answering in about 0.3 s instead of starting for 1.6 s::

        ready = gvx.docker.snapshot(IMAGE, golden=golden, snapshot="ready.snap", volume="ready.ext4")
        env = gvx.GvxEnv(IMAGE, golden=ready, restore="ready.snap", **gvx.docker.SANDBOX_OPTIONS)

    Give the episodes the same ``sandbox_options`` (network, ports) as here.
    """
    options = {**SANDBOX_OPTIONS, **sandbox_options}
    out = Path(volume)
    clone = golden.clone(out.with_name(f".{out.name}.seed"))
    try:
        with Sandbox(image, mounts=[Mount(clone.path, "/var/lib/docker")], **options) as sb:
            start(sb)
            sb.checkpoint(snapshot, stop=True)
        return clone.flatten(out)
    finally:
        clone.discard()


__all__ = ["IMAGE_ENV", "LOG", "SANDBOX_OPTIONS", "SETUP", "START", "STOP", "WAIT", "golden", "image", "snapshot", "start"]
