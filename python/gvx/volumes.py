"""Volumes: single-file ext4 images that sandboxes mount (typically at
/var/lib/docker) and that are cloned per episode in O(1).

>>> golden = gvx.Volume.create("golden.ext4", "16g")
>>> episode = golden.clone("episode-1.ext4")   # reflink, or a copy-on-write delta
>>> episode.check().clean
True
"""

from __future__ import annotations

import ctypes
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from . import _ffi
from ._options import parse_size

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class CheckResult:
    """The outcome of :meth:`Volume.check`: ``clean`` means nothing to fix or warn about."""

    checker: str
    clean: bool
    needs_recovery: bool
    problems: tuple[str, ...]


@dataclass(frozen=True)
class Volume:
    """A volume image on the host. ``clone_method`` says how a clone was made ("reflink" or "delta")."""

    path: Path
    clone_method: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def create(cls, path: PathLike, size: Union[int, str] = "16g") -> "Volume":
        """Makes a new, empty, sparse ext4 image (``size`` in bytes or like "16g")."""
        _ffi.call(_ffi.lib().gvx_volume_create, os.fsencode(path), ctypes.c_int64(parse_size(size)))
        return cls(Path(path))

    def clone(self, episode: PathLike) -> "Volume":
        """An O(1) writable copy for one episode; this volume (the golden) is never written."""
        method = ctypes.c_void_p()
        _ffi.call(_ffi.lib().gvx_volume_clone, os.fsencode(self.path), os.fsencode(episode), ctypes.byref(method))
        return Volume(Path(episode), _ffi.take_string(method))

    def flatten(self, out: PathLike) -> "Volume":
        """Writes this volume (an image or a delta) as a standalone image."""
        _ffi.call(_ffi.lib().gvx_volume_flatten, os.fsencode(self.path), os.fsencode(out))
        return Volume(Path(out))

    def check(self) -> CheckResult:
        """Checks the filesystem (e2fsck -fn when installed)."""
        out = ctypes.c_void_p()
        _ffi.call(_ffi.lib().gvx_volume_check, os.fsencode(self.path), ctypes.byref(out))
        d = json.loads(_ffi.take_string(out))
        return CheckResult(d["checker"], d["clean"], d["needs_recovery"], tuple(d.get("problems") or ()))

    def discard(self) -> None:
        """Deletes the image file (an episode's clone is just a file)."""
        self.path.unlink(missing_ok=True)
