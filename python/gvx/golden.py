"""Golden volumes: state prepared once (typically a whole /var/lib/docker with
pre-pulled images) and cloned per episode in O(1).

>>> golden = gvx.golden.build(DOCKER_IMAGE, setup=["docker load -i /tmp/app.tar"],
...                           volume="golden.ext4", path="/var/lib/docker")
>>> env = gvx.GvxEnv(DOCKER_IMAGE, golden=golden, volume_path="/var/lib/docker")
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
import time
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from . import errors
from .sandbox import Mount, Sandbox
from .volumes import Volume

PathLike = Union[str, "os.PathLike[str]"]


def _short(cmd: str, limit: int = 96) -> str:
    """A setup command as a progress line shows it: one line, bounded."""
    line = " ".join(cmd.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def build(
    image: Optional[str],
    *,
    setup: Sequence[str],
    volume: Union[PathLike, Volume],
    path: str = "/var/lib/docker",
    size: Union[int, str] = "16g",
    step_timeout: float = 1800.0,
    progress: Union[bool, Callable[[str], None]] = True,
    check: bool = True,
    uploads: Optional[Mapping[str, PathLike]] = None,
    **sandbox_options: Any,
) -> Volume:
    """Runs a seed sandbox with ``volume`` mounted at ``path``, runs ``setup`` in it,
    stops it gracefully (the volume is flushed and compacted) and returns the volume.

    A missing volume file is created with ``size``. ``progress=True`` prints a line per
    setup command on stderr; a callable receives the lines instead. With ``check``,
    the finished volume must pass ``e2fsck`` (:meth:`Volume.check`).
    """
    report: Callable[[str], None]
    if progress is True:
        report = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    elif callable(progress):
        report = progress
    else:
        report = lambda line: None  # noqa: E731
    vol = volume if isinstance(volume, Volume) else Volume(Path(volume))
    if not os.path.exists(vol.path):
        vol = Volume.create(vol.path, size)
        report(f"golden: created {vol.path} ({size})")
    start = time.perf_counter()
    with Sandbox(image, mounts=[Mount(vol.path, path)], **sandbox_options) as seed:
        for guest, host in (uploads or {}).items():
            report(f"golden: copying {host} to {guest}")
            seed.upload(host, guest)
        for i, cmd in enumerate(setup, 1):
            report(f"golden: [{i}/{len(setup)}] {_short(cmd)}")
            result = seed.exec(cmd, timeout=step_timeout, max_output=1 << 20)
            if not result.ok:
                raise errors.ExecError(result, cmd)
    report(f"golden: seeded in {time.perf_counter() - start:.1f} s; the volume is closed and compacted")
    if check:
        result_ = vol.check()
        if not result_.clean:
            raise errors.GvxError(f"golden volume {vol.path} is not clean after the seed stopped: {'; '.join(result_.problems)}")
    return vol
