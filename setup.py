"""Builds gvx's Go parts (rungv and libgvx.so) and its default image into the wheel.

`pip install .`, `pip wheel .` and `python -m build` run `go build` and put
rungv and libgvx.so in gvx/_lib/ and the default busybox image in
gvx/_data/, where the package finds them. What the build needs, and says
it lacks before it starts: Go 1.26 or newer on PATH, Debian's
busybox-static (/bin/busybox), and a C compiler for libgvx's cgo, which is
the pinned `ziglang` build requirement (pip installs it) or, without it,
the host's cc.

The wheel is tagged manylinux for the oldest glibc its libgvx.so needs,
read from the symbol versions it references: zig links it against glibc
2.17's, whatever the build host's glibc is, and the symbols libgvx uses are
older still (GLIBC_2.3.2 at most), so the tag is manylinux_2_5 (manylinux1)
and does not depend on the machine that built it. rungv is static (no cgo)
and needs no libc at all. What bounds the hosts gvx runs on is the kernel
(gVisor needs Linux 4.14.77+), not glibc.

Byte-reproducible: the same sources, Go, zig, setuptools and busybox give
the same wheel wherever they are unpacked (-trimpath, no VCS stamp, no
build ID in libgvx.so, no C debug info, fixed zip times and file modes).
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import stat
import struct
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent
VERSION_FILE = ROOT / "python" / "gvx" / "_version.py"

# The glibc whose symbol versions zig links libgvx.so against: a symbol
# newer than it fails the link instead of raising the wheel's floor.
ZIG_TARGET = "x86_64-linux-gnu.2.17"

# The oldest glibc a manylinux tag names (PEP 600; auditwheel knows none
# older), and the legacy names of the first three, which pip before 20.3
# reads and auditwheel adds.
MANYLINUX_FLOOR = (2, 5)
LEGACY_MANYLINUX = {(2, 5): "manylinux1", (2, 12): "manylinux2010", (2, 17): "manylinux2014"}

# Zip entry times when SOURCE_DATE_EPOCH is not set: 1980-01-01, the
# oldest a zip can hold, so that two builds of the same inputs match.
DEFAULT_SOURCE_DATE_EPOCH = "315532800"


def read_version() -> str:
    """The version from python/gvx/_version.py, the one place it is set."""
    m = re.search(r'^__version__ = "([^"]+)"$', VERSION_FILE.read_text(), re.M)
    if m is None:
        raise SystemExit(f"{VERSION_FILE} must set __version__ = \"X.Y.Z\" on a line of its own")
    return m.group(1)


VERSION = read_version()


def zig_cc() -> "str | None":
    """The C compiler command using the ziglang build requirement, or None."""
    try:
        import ziglang  # noqa: F401  (only whether it is installed)
    except ImportError:
        return None
    return f"{shlex.quote(sys.executable)} -m ziglang cc -target {ZIG_TARGET}"


def missing_build_tools() -> "list[str]":
    """What the build needs and lacks, each with how to get it."""
    missing = []
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        missing.append(
            f"a linux/x86_64 build machine (this is {platform.system()}/{platform.machine()}): "
            "gvx's wheel carries x86_64 binaries and a busybox for x86_64"
        )
    if shutil.which("go") is None:
        missing.append(
            "Go 1.26 or newer, to build rungv and libgvx.so: install it from https://go.dev/dl "
            "and put its bin/ on PATH (Debian's golang package is older)"
        )
    if not Path("/bin/busybox").exists():
        missing.append(
            "/bin/busybox, the static busybox the default image is made of: "
            "apt-get install busybox-static (Debian, Ubuntu)"
        )
    if zig_cc() is None and shutil.which("cc") is None:
        missing.append(
            "a C compiler for libgvx's cgo: the ziglang build requirement (pip installs it unless "
            "--no-build-isolation is given: then pip install ziglang) or the host's cc (apt-get install gcc)"
        )
    return missing


def go_build(out_dir: Path) -> None:
    go = shutil.which("go")
    assert go is not None  # checked by missing_build_tools
    out_dir.mkdir(parents=True, exist_ok=True)
    # -s -w: no symbol tables (tens of MB less). -trimpath: no build
    # directory in the binaries, so two builds of the same sources match
    # byte for byte wherever they are unpacked (rungv's Go build ID is a
    # hash of its inputs, so it matches too, and the Sentry keeps it as the
    # snapshots' build identity); -buildvcs=false: nor does a build from a
    # checkout differ from one from the sdist.
    ldflags = f"-s -w -X main.version={VERSION}"
    flags = ["-trimpath", "-buildvcs=false", "-ldflags", ldflags]
    env = {**os.environ, "GOOS": "linux", "GOARCH": "amd64"}
    subprocess.run(
        [go, "build", *flags, "-o", str(out_dir / "rungv"), "./core/cmd/rungv"],
        cwd=ROOT, env={**env, "CGO_ENABLED": "0"}, check=True,
    )
    # cgo's C parts without -g: their debug information would name the
    # compiler's directories, and nothing reads it.
    cgo = {**env, "CGO_ENABLED": "1", "CGO_CFLAGS": "-O2", "CGO_LDFLAGS": "-s"}
    cc = zig_cc()
    if cc is not None:
        cgo["CC"] = cc
    else:
        print(
            "gvx: ziglang is not installed, so libgvx.so links against this host's glibc "
            "and the wheel is tagged for it (pip install ziglang for a wheel that runs on any glibc)",
            file=sys.stderr,
        )
    # A cgo package's build ID hashes its directory even with -trimpath, so
    # libgvx.so has none (nothing reads it; rungv's is the one snapshots use).
    cgo_flags = ["-trimpath", "-buildvcs=false", "-ldflags", ldflags + " -buildid="]
    subprocess.run(
        [go, "build", "-buildmode=c-shared", *cgo_flags, "-o", str(out_dir / "libgvx.so"), "./capi"],
        cwd=ROOT, env=cgo, check=True,
    )
    # cgo writes a generated header beside the library; gvx.h is the contract.
    (out_dir / "libgvx.h").unlink(missing_ok=True)


def build_default_image(out_dir: Path) -> None:
    """The embedded default image (busybox, from Debian's busybox-static)."""
    subprocess.run(
        ["go", "run", "-trimpath", "./core/internal/testimage/mkimage", "-default", str(out_dir)],
        cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
    )
    # busybox is GPL-2.0: say which one the image holds and where its source is.
    try:
        pkg = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version} ${source:Version}", "busybox-static"],
            check=True, capture_output=True, text=True,
        ).stdout.split()
        note = (
            f"/bin/busybox in the default image is Debian's busybox-static {pkg[0]}, unchanged.\n"
            f"Its source is Debian's busybox source package {pkg[1]}: apt-get source busybox={pkg[1]}\n"
        )
    except (OSError, subprocess.CalledProcessError, IndexError):
        note = "/bin/busybox in the default image is the build machine's /bin/busybox, unchanged (not a Debian package).\n"
    (out_dir.parent / "busybox-source.txt").write_text(
        note + "busybox is GPL-2.0-only; the license is in the wheel's .dist-info/licenses/licenses/busybox/.\n"
    )


def glibc_needed(path: Path) -> "tuple[int, int]":
    """The newest GLIBC_x.y symbol version an ELF file needs, (0, 0) for none.

    Reads the version-needs section (SHT_GNU_verneed), which is what the
    dynamic loader checks against the host's libc.
    """
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise SystemExit(f"{path} is not a little-endian 64-bit ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQII", data, shoff + i * shentsize) for i in range(shnum)]
    newest = (0, 0)
    for _, sh_type, _, _, offset, _, link, count in sections:
        if sh_type != 0x6FFFFFFE:  # SHT_GNU_verneed; sh_info is its entry count
            continue
        strtab = sections[link][4]
        need = offset
        for _ in range(count):
            _, cnt, _, aux, nxt = struct.unpack_from("<HHIII", data, need)
            a = need + aux
            for _ in range(cnt):
                _, _, _, name, anext = struct.unpack_from("<IHHII", data, a)
                end = data.index(b"\0", strtab + name)
                m = re.fullmatch(rb"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", data[strtab + name:end])
                if m:
                    newest = max(newest, (int(m.group(1)), int(m.group(2))))
                a += anext
            need += nxt
    return newest


def manylinux_tag(lib_dir: Path) -> str:
    """The wheel's platform tag: manylinux for the oldest glibc its ELF files
    need, spelled as `auditwheel repair` spells it (sorted, with the legacy
    alias), so that repair has nothing to add."""
    floor = max([MANYLINUX_FLOOR] + [glibc_needed(lib_dir / name) for name in ("libgvx.so", "rungv")])
    tags = [f"manylinux_{floor[0]}_{floor[1]}_x86_64"]
    if floor in LEGACY_MANYLINUX:
        tags.append(f"{LEGACY_MANYLINUX[floor]}_x86_64")
    return ".".join(sorted(tags))


def normalize_modes(tree: Path) -> None:
    """0755 for executables, 0644 for the rest: the wheel records file modes,
    which would otherwise follow the umask of whoever built it."""
    for path in sorted(tree.rglob("*")):
        if path.is_file() and not path.is_symlink():
            executable = path.stat().st_mode & stat.S_IXUSR
            path.chmod(0o755 if executable else 0o644)


class BuildPyWithGo(build_py):
    def run(self) -> None:
        missing = missing_build_tools()
        if missing:
            raise SystemExit(
                "gvx's build needs, and this machine lacks:\n"
                + "".join(f"  - {m}\n" for m in missing)
                + "Or install the prebuilt wheel instead: pip install gvx (linux/x86_64)."
            )
        super().run()
        package = Path(self.build_lib) / "gvx"
        go_build(package / "_lib")
        build_default_image(package / "_data" / "default-image")


class ManylinuxWheel(bdist_wheel):
    """The wheel holds native executables, not a CPython extension: any
    Python 3 on linux/x86_64 with a glibc new enough for libgvx.so can load
    it (py3-none-manylinux1_x86_64.manylinux_2_5_x86_64)."""

    def run(self) -> None:
        os.environ.setdefault("SOURCE_DATE_EPOCH", DEFAULT_SOURCE_DATE_EPOCH)
        super().run()

    def get_tag(self) -> "tuple[str, str, str]":
        build_py_cmd = self.get_finalized_command("build_py")
        return "py3", "none", manylinux_tag(Path(build_py_cmd.build_lib) / "gvx" / "_lib")

    def write_wheelfile(self, wheelfile_base: str, *args: object, **kwargs: object) -> None:
        # Called once the wheel's tree is complete, before it is zipped.
        super().write_wheelfile(wheelfile_base, *args, **kwargs)  # type: ignore[arg-type]
        normalize_modes(Path(self.bdist_dir))


class BinaryDistribution(Distribution):
    """The wheel carries native code, so it is platform-specific."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    version=VERSION,
    cmdclass={"build_py": BuildPyWithGo, "bdist_wheel": ManylinuxWheel},
    distclass=BinaryDistribution,
)
