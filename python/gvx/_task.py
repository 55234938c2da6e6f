"""An episode's task: what ``GvxEnv.reset(options=...)`` puts into its sandbox."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from . import errors

if TYPE_CHECKING:
    from .sandbox import Sandbox


@dataclass(frozen=True)
class EpisodeTask:
    """What ``GvxEnv.reset(options=...)`` puts into an episode's sandbox."""

    upload: tuple[tuple[str, str], ...] = ()
    files: tuple[tuple[str, bytes], ...] = ()
    setup: tuple[str, ...] = ()

    def apply(self, sb: Sandbox) -> None:
        for local, remote in self.upload:
            sb.upload(local, remote)
        for path, data in self.files:
            sb.write_file(path, data, make_parents=True)
        for command in self.setup:
            sb.exec(command, check=True)


_TASK_KEYS = ("upload", "files", "setup")


def episode_task(options: Optional[dict[str, Any]]) -> EpisodeTask:
    """Checks reset's options before any sandbox is touched."""
    if not options:
        return EpisodeTask()
    unknown = sorted(set(options) - set(_TASK_KEYS))
    if unknown:
        raise errors.InvalidArgumentError(f"reset(options=...): unknown keys {unknown}; an episode's task takes {list(_TASK_KEYS)}")
    upload = options.get("upload") or {}
    files = options.get("files") or {}
    setup = options.get("setup") or ()
    if not isinstance(upload, dict) or not all(isinstance(k, (str, os.PathLike)) and isinstance(v, str) for k, v in upload.items()):
        raise errors.InvalidArgumentError("reset(options={'upload': ...}) maps host paths to guest paths: {'tasks/1/repo': '/workspace/repo'}")
    for local in upload:
        if not os.path.exists(local):
            raise errors.InvalidArgumentError(f"reset(options={{'upload': ...}}): {os.fspath(local)!r} does not exist on the host")
    if not isinstance(files, dict) or not all(isinstance(k, str) and k.startswith("/") and isinstance(v, (str, bytes)) for k, v in files.items()):
        raise errors.InvalidArgumentError("reset(options={'files': ...}) maps absolute guest paths to str or bytes: {'/workspace/ISSUE.md': text}")
    if isinstance(setup, str) or not all(isinstance(c, str) for c in setup):
        raise errors.InvalidArgumentError("reset(options={'setup': ...}) is a list of shell commands: ['cd /workspace/repo && git checkout -q abc123']")
    return EpisodeTask(
        upload=tuple((os.fspath(k), v) for k, v in upload.items()),
        files=tuple((k, v.encode() if isinstance(v, str) else bytes(v)) for k, v in files.items()),
        setup=tuple(setup),
    )
