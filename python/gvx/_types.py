"""The argument types of gvx's calls: paths, commands, file owners, mounts."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence, Union

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
