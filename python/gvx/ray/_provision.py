"""Per-node provisioning: what a pool's environments need, made once on each node.

A user names an artefact once on the driver — an image reference, a golden
volume's recipe (:func:`docker_golden`, :func:`golden`), a snapshot's recipe
(:func:`docker_snapshot`) — and each node that hosts environments makes it
once, into its own cache, and clones or restores it locally per episode.
What crosses the network is the recipe, plus one copy per node of the files
it names (``docker save`` archives, uploads), through Ray's object store.

On a node the artefact lives under ``$GVX_CACHE/provisioned/KEY`` (``KEY``
a digest of the recipe and of its files' content), made under a file lock:
several actors or drivers on one node make it once, and a later pool finds
it there. Nodes that share ``GVX_CACHE`` on a filesystem with working
``flock`` (NFSv4, CephFS, a local disk) share the artefact: the first node
makes it and the others wait for it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import ray

from .. import docker as _docker
from .. import errors, golden as _golden
from ..images import pull
from ..volumes import Volume

__all__ = ["GoldenRecipe", "Provisioned", "SnapshotRecipe", "docker_golden", "docker_snapshot", "golden"]


@dataclass(frozen=True)
class _File:
    """A file of the driver's, in Ray's object store."""

    name: str
    sha256: str
    ref: Any  # ray.ObjectRef of its bytes


def _ship(path: Union[str, "os.PathLike[str]"], what: str) -> _File:
    p = Path(path)
    if not p.is_file():
        raise errors.InvalidArgumentError(f"{what} {str(p)!r} is not a file on this machine")
    data = p.read_bytes()
    return _File(p.name, hashlib.sha256(data).hexdigest(), ray.put(data))


def _key(kind: str, fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps({"kind": kind, **fields}, sort_keys=True, default=str).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class GoldenRecipe:
    """How to build a golden volume; each node builds it once (see :func:`docker_golden`)."""

    image: Optional[str]
    docker: bool
    setup: tuple[str, ...]
    files: tuple[tuple[str, _File], ...]  # guest path (uploads) or "" (a docker archive), file
    path: str
    size: Union[int, str]
    sandbox_options: tuple[tuple[str, Any], ...]
    key: str

    @property
    def name(self) -> str:
        return f"golden {self.key}"


@dataclass(frozen=True)
class SnapshotRecipe:
    """How to snapshot a ready dockerd on a golden volume; each node makes it once."""

    image: str
    golden: GoldenRecipe
    sandbox_options: tuple[tuple[str, Any], ...]
    key: str

    @property
    def name(self) -> str:
        return f"snapshot {self.key}"


@dataclass(frozen=True)
class Provisioned:
    """One artefact on one node, from :attr:`gvx.ray.EnvPool.provisioning`."""

    node: str  # the Ray node id
    kind: str  # "image", "golden" or "snapshot"
    name: str  # the image reference, or the recipe's name
    made: bool  # made by this pool on that node (False: it was there already)
    seconds: float


def docker_golden(
    image: str, *, archives: tuple[Union[str, "os.PathLike[str]"], ...] = (), setup: tuple[str, ...] = (), size: Union[int, str] = "16g", **sandbox_options: Any
) -> GoldenRecipe:
    """The recipe of :func:`gvx.docker.golden`: a ``/var/lib/docker`` with the
    ``docker save`` ``archives`` loaded and ``setup`` run, built once on each
    node. The archives are read here and sent once to each node."""
    files = tuple(("", _ship(a, "archive")) for a in archives)
    fields = {"image": image, "setup": list(setup), "files": [f.sha256 for _, f in files], "size": size, "options": sandbox_options}
    return GoldenRecipe(image, True, tuple(setup), files, "/var/lib/docker", size, tuple(sorted(sandbox_options.items())), _key("docker-golden", fields))


def golden(
    image: Optional[str],
    *,
    setup: tuple[str, ...],
    path: str = "/var/lib/docker",
    size: Union[int, str] = "16g",
    uploads: Optional[dict[str, Union[str, "os.PathLike[str]"]]] = None,
    **sandbox_options: Any,
) -> GoldenRecipe:
    """The recipe of :func:`gvx.golden.build`; ``uploads`` maps guest paths to
    files here, sent once to each node."""
    files = tuple((guest, _ship(host, "upload")) for guest, host in (uploads or {}).items())
    fields = {"image": image, "setup": list(setup), "files": [(g, f.sha256) for g, f in files], "path": path, "size": size, "options": sandbox_options}
    return GoldenRecipe(image, False, tuple(setup), files, path, size, tuple(sorted(sandbox_options.items())), _key("golden", fields))


def docker_snapshot(image: str, *, golden: GoldenRecipe, **sandbox_options: Any) -> SnapshotRecipe:
    """The recipe of :func:`gvx.docker.snapshot`: a ready dockerd on a clone of
    ``golden``, snapshotted once on each node; episodes restore it on clones.
    Give the pool the same sandbox options (network, ports)."""
    if not golden.docker:
        raise errors.InvalidArgumentError("docker_snapshot(golden=...) takes a docker_golden recipe: dockerd runs on it")
    fields = {"image": image, "golden": golden.key, "options": sandbox_options}
    return SnapshotRecipe(image, golden, tuple(sorted(sandbox_options.items())), _key("docker-snapshot", fields))


# On a node.


class _Locked:
    """An exclusive flock on dir/.lock while the block runs."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def __enter__(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)


def _cache() -> Path:
    return Path(os.environ.get("GVX_CACHE") or Path.home() / ".cache" / "gvx") / "provisioned"


def _fetch(f: _File, to: Path) -> Path:
    data = ray.get(f.ref)
    if hashlib.sha256(data).hexdigest() != f.sha256:
        raise errors.GvxError(f"{f.name}: the copy that reached this node differs from the driver's (sha256); provision again")
    to.write_bytes(data)
    return to


def make_golden(recipe: GoldenRecipe) -> tuple[Volume, bool]:
    """recipe's volume on this node, and whether this call built it."""
    d = _cache() / recipe.key
    volume = d / "golden.ext4"
    with _Locked(d):
        if (d / "done").exists():
            return Volume(volume), False
        part = d / "golden.ext4.part"
        part.unlink(missing_ok=True)
        fetched = [(guest, _fetch(f, d / f"file-{i}-{f.name}")) for i, (guest, f) in enumerate(recipe.files)]
        try:
            options = dict(recipe.sandbox_options)
            if recipe.docker:
                assert recipe.image is not None
                _docker.golden(recipe.image, volume=part, archives=[p for _, p in fetched], setup=recipe.setup, size=recipe.size, progress=False, **options)
            else:
                _golden.build(
                    recipe.image, setup=recipe.setup, volume=part, path=recipe.path, size=recipe.size, progress=False,
                    uploads={guest: p for guest, p in fetched}, **options,
                )
        finally:
            for _, p in fetched:
                p.unlink(missing_ok=True)
        os.replace(part, volume)
        (d / "done").touch()
        return Volume(volume), True


def make_snapshot(recipe: SnapshotRecipe) -> tuple[Volume, Path, bool, bool]:
    """recipe's volume and snapshot file on this node, whether this call made
    the snapshot, and whether it built the golden under it."""
    golden_volume, golden_made = make_golden(recipe.golden)
    d = _cache() / recipe.key
    volume, snap = d / "ready.ext4", d / "ready.snap"
    with _Locked(d):
        if (d / "done").exists():
            return Volume(volume), snap, False, golden_made
        for p in (d / "ready.ext4.part", d / "ready.snap.part"):
            p.unlink(missing_ok=True)
        _docker.snapshot(recipe.image, golden=golden_volume, snapshot=d / "ready.snap.part", volume=d / "ready.ext4.part", **dict(recipe.sandbox_options))
        os.replace(d / "ready.snap.part", snap)
        os.replace(d / "ready.ext4.part", volume)
        (d / "done").touch()
        return Volume(volume), snap, True, golden_made


def pull_image(ref: str) -> bool:
    """Converts ref into this node's cache; whether this call converted it."""
    kinds: list[str] = []
    pull(ref, progress=lambda event: kinds.append(str(event.get("kind", ""))))
    return "cached" not in kinds and "waiting" not in kinds


def provision(node: str, env_options: dict[str, Any]) -> tuple[dict[str, Any], list[Provisioned]]:
    """env_options with each recipe made on this node and replaced by what
    GvxEnv takes, and what was made or found."""
    out = dict(env_options)
    done: list[Provisioned] = []
    image = out.get("image")
    if isinstance(image, str):
        start = time.perf_counter()
        made = pull_image(image)
        done.append(Provisioned(node, "image", image, made, time.perf_counter() - start))
    restore = out.get("restore")
    if isinstance(restore, SnapshotRecipe):
        start = time.perf_counter()
        volume, snap, made, golden_made = make_snapshot(restore)
        seconds = time.perf_counter() - start
        done.append(Provisioned(node, "golden", restore.golden.name, golden_made, seconds if golden_made else 0.0))
        done.append(Provisioned(node, "snapshot", restore.name, made, seconds))
        if out.get("golden") not in (None, restore.golden):
            raise errors.InvalidArgumentError("restore=docker_snapshot(...) brings its own volume: drop golden=, or give the snapshot's golden")
        out["golden"], out["restore"] = volume, str(snap)
    g = out.get("golden")
    if isinstance(g, GoldenRecipe):
        start = time.perf_counter()
        volume, made = make_golden(g)
        done.append(Provisioned(node, "golden", g.name, made, time.perf_counter() - start))
        out["golden"] = volume
    return out, done


def recipes_out(env_options: dict[str, Any]) -> dict[str, Any]:
    """env_options as the driver checks them: recipes are checked when made."""
    out = dict(env_options)
    if isinstance(out.get("golden"), GoldenRecipe):
        out["golden"] = None
    if isinstance(out.get("restore"), SnapshotRecipe):
        out["restore"] = None
    return out
