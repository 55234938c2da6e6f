"""Pulling images into gvx's cache, with progress on a terminal or in Jupyter."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, TextIO, Union

from . import _ffi


@dataclass(frozen=True)
class Image:
    """A cached image: its ID, its EROFS root filesystem and what it held."""

    id: str
    erofs: str
    size: int
    layers: int
    files: int
    refs: tuple[str, ...]
    xattr_files: int = 0


ProgressFn = Callable[[dict[str, Any]], None]


class _Bar:
    """One line redrawn in place on a terminal; a line per layer elsewhere (logs, Jupyter)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.last = 0.0

    def __call__(self, e: dict[str, Any]) -> None:
        kind = e.get("kind")
        if kind == "resolved":
            self._line(f"Pulling {e['ref']} (image {e['id'][7:19]})")
        elif kind == "cached":
            self._line(f"Image {e['id'][7:19]} is cached already")
        elif kind == "layer":
            done, size = e.get("done", 0), e.get("size", 0)
            if size and done >= size:
                self._line(f"  layer {e['layer']}/{e['layers']} {_mib(done)} done")
            elif self.tty and time.monotonic() - self.last > 0.1:
                self.last = time.monotonic()
                width = 30
                filled = int(width * done / size) if size else 0
                self.out.write(f"\r\033[K  layer {e['layer']}/{e['layers']} [{'=' * filled}{' ' * (width - filled)}] {_mib(done)} / {_mib(size)}")
                self.out.flush()
        elif kind == "done":
            self._line("Done")

    def _line(self, text: str) -> None:
        if self.tty:
            self.out.write("\r\033[K")
        self.out.write(text + "\n")
        self.out.flush()


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def pull(
    ref: str,
    *,
    cache: Optional[Union[str, "os.PathLike[str]"]] = None,
    insecure: bool = False,
    platform: Optional[str] = None,
    progress: Union[bool, ProgressFn] = True,
) -> Image:
    """Converts an image into the cache (a no-op if it is there) and returns it.

    ``ref`` is a registry reference, ``oci:DIR[:TAG]`` or ``docker-archive:FILE.tar``.
    ``progress=True`` draws progress on stderr (redrawn on a terminal, a line per
    layer in logs and notebooks); a callable receives each event as a dict.
    """
    options: dict[str, object] = {"insecure": insecure}
    if cache is not None:
        options["cache"] = os.fspath(cache)
    if platform is not None:
        options["platform"] = platform
    report: Optional[ProgressFn] = None
    if progress is True:
        report = _Bar(sys.stderr)
    elif callable(progress):
        report = progress

    def on_event(_: Optional[int], event: bytes) -> None:
        if report is not None:
            report(json.loads(event))

    callback = _ffi.PROGRESS_FN(on_event)
    out = ctypes.c_void_p()
    _ffi.call(_ffi.lib().gvx_image_pull, ref.encode(), json.dumps(options).encode(), callback, None, ctypes.byref(out))
    d = json.loads(_ffi.take_string(out))
    return Image(
        id=d["id"], erofs=d["erofs"], size=d["size"], layers=d["layers"], files=d["files"],
        refs=tuple(d.get("refs") or ()), xattr_files=d.get("xattr_files", 0),
    )
