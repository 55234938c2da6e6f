"""Does a gvx wheel claim to install on this system? Prints "yes" or "no: why".

Run with the clean room's own python3 (3.9 on bullseye, no packages) before
pip sees the wheel, so that the test can tell an honest refusal (the wheel's
tags or Requires-Python exclude this system, and pip says so) from a
dishonest install (pip takes the wheel, and then gvx cannot load). It reads
only the wheel's file name and its METADATA, as pip does, but decides with
its own few rules, not pip's code.
"""

from __future__ import annotations

import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Optional, Tuple

Version = Tuple[int, ...]

# The glibc each legacy manylinux alias stands for (PEP 599, PEP 571, PEP 513).
_LEGACY = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}


def _version(text: str) -> Version:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def _glibc_floor(platform_tag: str) -> Optional[Version]:
    """The glibc a platform tag asks for; () for a plain linux tag (it asks for none)."""
    if not platform_tag.endswith("_x86_64"):
        return None
    name = platform_tag[: -len("_x86_64")]
    if name == "linux":
        return ()
    if name in _LEGACY:
        return _LEGACY[name]
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)", name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _python_ok(spec: str, have: Version) -> Optional[str]:
    """None when ``have`` meets Requires-Python ``spec``, else why not."""
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        m = re.fullmatch(r"(>=|<=|>|<|==|!=)\s*([0-9.]+)(\.\*)?", clause)
        if not m:
            raise SystemExit(f"claims.py: cannot judge Requires-Python clause {clause!r}: teach claims.py its operator")
        op, want, star = m.group(1), _version(m.group(2)), m.group(3)
        got = have[: len(want)] if star or op in ("==", "!=") else have
        ok = {
            ">=": got >= want, "<=": got <= want, ">": got > want, "<": got < want,
            "==": got == want, "!=": got != want,
        }[op]
        if not ok:
            return f"Requires-Python {spec!r} excludes Python {'.'.join(map(str, have))}"
    return None


def claim(wheel: Path) -> Optional[str]:
    """None when the wheel says it fits this system, else why it does not."""
    m = re.fullmatch(r"gvx-[^-]+(?:-\d[^-]*)?-([^-]+)-([^-]+)-([^-]+)\.whl", wheel.name)
    if not m:
        raise SystemExit(f"claims.py: {wheel.name} is not a wheel file name (name-version-python-abi-platform.whl)")
    pythons, abis, platforms = (tags.split(".") for tags in m.groups())
    have_python = sys.version_info[:3]
    cp = f"cp{have_python[0]}{have_python[1]}"
    if not set(pythons) & {"py3", f"py{have_python[0]}{have_python[1]}", cp}:
        return f"its Python tags {pythons} exclude CPython {have_python[0]}.{have_python[1]}"
    if not set(abis) & {"none", "abi3", cp}:
        return f"its ABI tags {abis} exclude this interpreter"
    libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    have_glibc = _version(libc)
    floors = [_glibc_floor(p) for p in platforms]
    if not any(f is not None and have_glibc >= f for f in floors):
        return f"its platform tags {platforms} exclude {libc} on x86_64"
    return python_claim(wheel)


def python_claim(wheel: Path) -> Optional[str]:
    """None when the wheel's Requires-Python admits this Python, else why not."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        for line in z.read(meta).decode().splitlines():
            if line.startswith("Requires-Python:"):
                return _python_ok(line.split(":", 1)[1].strip(), sys.version_info[:3])
            if not line:
                break
    return None


if __name__ == "__main__":
    # claims.py WHEEL: the whole claim; claims.py --python WHEEL: Requires-Python alone.
    python_only = sys.argv[1] == "--python"
    wheel = Path(sys.argv[-1])
    why = python_claim(wheel) if python_only else claim(wheel)
    print("yes" if why is None else f"no: {why}")
