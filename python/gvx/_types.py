"""The argument types of gvx's calls: paths, commands, file owners, mounts, volumes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence, Union

PathLike = Union[str, "os.PathLike[str]"]
Command = Union[str, Sequence[str]]
# Who a file written into a sandbox belongs to: a uid, or "uid:gid", "name",
# "name:group" as exec's ``user``.
Owner = Union[int, str]


@dataclass(frozen=True)
class Mount:
    """A volume (a single-file ext4 image on the host) mounted at ``target`` in the sandbox."""

    source: Union[str, "os.PathLike[str]"]
    target: str
    read_only: bool = False

    def _json(self) -> dict[str, object]:
        return {"type": "volume", "source": os.fspath(self.source), "target": self.target, "readonly": self.read_only}


# Where a volume goes, as a value of gvx.Sandbox's ``volumes`` mapping: a
# target ("/data"), or docker-py's {"bind": "/data", "mode": "ro"}.
VolumeTarget = Union[str, Mapping[str, str]]
# gvx.Sandbox's ``volumes``, as docker's: {"data.ext4": "/data"} or
# ["data.ext4:/data", "golden.ext4:/var/lib/docker:ro"]; each source is an
# ext4 image file on the host, never a directory.
Volumes = Union[Mapping[str, VolumeTarget], Mapping[Path, VolumeTarget], Sequence[str]]
