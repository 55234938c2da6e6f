"""Builds gvx's Go parts (rungv and libgvx.so) into the wheel.

`pip install .` and `pip wheel .` run `go build` (Go 1.26 or newer on PATH)
and put both artefacts in gvx/_lib/, where the package finds them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent
VERSION = "0.1.0"


def go_build(out_dir: Path) -> None:
    go = shutil.which("go")
    if go is None:
        raise SystemExit(
            "gvx needs the Go toolchain (1.26+) to build rungv and libgvx.so: "
            "install it and make sure `go` is on PATH."
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    # -s -w: no symbol tables in the shipped binaries (tens of MB less).
    ldflags = f"-s -w -X main.version={VERSION}"
    env = dict(os.environ)
    subprocess.run(
        [go, "build", "-ldflags", ldflags, "-o", str(out_dir / "rungv"), "./core/cmd/rungv"],
        cwd=ROOT, env={**env, "CGO_ENABLED": "0"}, check=True,
    )
    subprocess.run(
        [go, "build", "-buildmode=c-shared", "-ldflags", ldflags,
         "-o", str(out_dir / "libgvx.so"), "./capi"],
        cwd=ROOT, env={**env, "CGO_ENABLED": "1"}, check=True,
    )
    # cgo writes a generated header beside the library; gvx.h is the contract.
    (out_dir / "libgvx.h").unlink(missing_ok=True)


def build_default_image(out_dir: Path) -> None:
    """The embedded default image (busybox, from Debian's busybox-static)."""
    if not Path("/bin/busybox").exists():
        raise SystemExit(
            "gvx embeds a busybox image built from Debian's busybox-static: "
            "install it first (apt-get install busybox-static)."
        )
    subprocess.run(
        ["go", "run", "./core/internal/testimage/mkimage", "-default", str(out_dir)],
        cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
    )


class BuildPyWithGo(build_py):
    def run(self) -> None:
        super().run()
        package = Path(self.build_lib) / "gvx"
        go_build(package / "_lib")
        build_default_image(package / "_data" / "default-image")


class PlatformWheel(bdist_wheel):
    """The wheel holds native executables, not a CPython extension: any Python 3
    on linux/x86_64 can load it (py3-none-linux_x86_64)."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, plat = super().get_tag()
        return "py3", "none", plat


class BinaryDistribution(Distribution):
    """The wheel carries native code, so it is platform-specific."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    version=VERSION,
    cmdclass={"build_py": BuildPyWithGo, "bdist_wheel": PlatformWheel},
    distclass=BinaryDistribution,
)
