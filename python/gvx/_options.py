"""The one place where the arguments of gvx.Sandbox(...) and Sandbox.exec(...)
are checked and turned into the JSON libgvx takes.

gvx.aio, GvxEnv, EnvPool, gvx.golden and gvx.docker all reach these through
gvx.Sandbox, so every entry point rejects a bad argument with the same
message: it names the argument, says what to give, and says what it got.
Arguments are typed ``object`` here because this is where an untyped caller's
value is first looked at.
"""

from __future__ import annotations

import inspect
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, ForwardRef, Optional, TypedDict, TypeVar, Union, cast

from . import errors
from ._types import Mount

# The one size grammar, shared with rungv's flags through core/testdata/sizes.json.
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(?:([kmgt])i?)?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
# Sizes cross the C ABI as int64.
_SIZE_LIMIT = 1 << 63

_PORT = re.compile(
    r"^(?:(?P<ip>\[[0-9a-fA-F:]+\]|[0-9.]+):(?=\d*:))?(?:(?P<host>\d*):)?(?P<guest>\d+)(?:/(?P<proto>tcp|udp))?$"
)

_ENV_WANT = "a mapping of str to str or a list of 'NAME=value' strings"


def _kind(value: object) -> str:
    """The type of value with its article: "an int", "a str"."""
    name = type(value).__name__
    return ("an " if name[0] in "aeiou" else "a ") + name


def _bad(name: str, want: str, value: object) -> errors.InvalidArgumentError:
    """The error for an argument of the wrong type."""
    return errors.InvalidArgumentError(f"{name}: expected {want}, got {_kind(value)} {value!r:.60}")


def _str(name: str, value: object, want: str = "a str") -> str:
    if not isinstance(value, str):
        raise _bad(name, want, value)
    return value


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _bad(name, "True or False", value)
    return value


def _count(name: str, value: object, want: str) -> int:
    """An int (not a bool, which would pass for 0 or 1 by accident)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, want, value)
    return value


def _seconds(name: str, value: object) -> float:
    """A finite, non-negative number of seconds: NaN and infinity have no JSON
    form libgvx reads."""
    want = "seconds as a number, or None for no timeout"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(name, want, value)
    seconds = float(value)
    if not math.isfinite(seconds):
        raise errors.InvalidArgumentError(f"{name}={value!r}: give a finite number of seconds, or None for no timeout")
    if seconds < 0:
        raise errors.InvalidArgumentError(f"{name}={value!r}: must not be negative; give seconds, or None for no timeout")
    return seconds


def _absolute(name: str, value: object, example: str) -> str:
    path = _str(name, value, f"an absolute path in the sandbox such as {example!r}")
    if not path.startswith("/"):
        raise errors.InvalidArgumentError(f"{name}={path!r}: not an absolute path; give one such as {example!r}")
    return path


def _path(name: str, value: object) -> str:
    """A host path: str or os.PathLike."""
    if not isinstance(value, (str, os.PathLike)):
        raise _bad(name, "a host path (str or os.PathLike)", value)
    path = os.fspath(value)
    if not isinstance(path, str):
        raise _bad(name, "a host path (str or os.PathLike of str)", path)
    return path


def _items(name: str, value: object, want: str) -> list[object]:
    """The items of a list argument. A lone str or bytes, which iterating would
    take one character at a time, is refused, and so is a mapping."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise _bad(name, want, value)
    return list(value)


def _str_list(name: str, value: object, example: str) -> list[str]:
    want = f"a list of str such as {example}"
    out = []
    for item in _items(name, value, want):
        if not isinstance(item, str):
            raise errors.InvalidArgumentError(f"{name}: {item!r} is {_kind(item)}; give {want}")
        out.append(item)
    return out


def env_list(name: str, env: object) -> list[str]:
    """Environment variables as libgvx takes them: ["NAME=value", ...]."""
    if env is None:
        return []
    out = []
    if isinstance(env, Mapping):
        for key, val in env.items():
            if not isinstance(key, str):
                raise errors.InvalidArgumentError(f"{name}: the name {key!r} is {_kind(key)}; expected {_ENV_WANT}")
            if not isinstance(val, str):
                raise errors.InvalidArgumentError(
                    f"{name}: the value of {key!r} is {_kind(val)} ({val!r:.40}); expected {_ENV_WANT} (convert it with str())"
                )
            out.append(_env_entry(name, f"{key}={val}", len(key)))
        return out
    for entry in _items(name, env, _ENV_WANT):
        if not isinstance(entry, str):
            raise errors.InvalidArgumentError(f"{name}: {entry!r} is {_kind(entry)}; expected {_ENV_WANT}")
        out.append(_env_entry(name, entry, entry.find("=")))
    return out


def _env_entry(name: str, entry: str, split: int) -> str:
    """Checks NAME=value whose name ends at split (-1: no '=')."""
    if split < 0:
        raise errors.InvalidArgumentError(f"{name}: {entry!r} is not 'NAME=value'")
    if split == 0 or "=" in entry[:split]:
        raise errors.InvalidArgumentError(f"{name}: {entry!r} has no name before '='; write 'NAME=value'")
    if "\0" in entry:
        raise errors.InvalidArgumentError(f"{name}: {entry!r} holds a NUL character, which an environment cannot carry")
    return entry


def parse_size(value: object, name: str = "size") -> int:
    """Parses 536870912, "512m", "2g", "1.5GiB" into bytes (binary units)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _bad(name, "bytes (int) or a size such as '512m'", value)
    if isinstance(value, int):
        if value < 0:
            raise errors.InvalidArgumentError(f"{name}={value}: must not be negative")
        size = value
    else:
        m = _SIZE.match(value)
        if not m:
            raise errors.InvalidArgumentError(f"{name}={value!r} is not a size; write bytes or a size such as '512m' or '2g'")
        size = int(Fraction(m.group(1)) * _UNITS[(m.group(2) or "").lower()])
    if size >= _SIZE_LIMIT:
        raise errors.InvalidArgumentError(f"{name}={value!r} is 8 EiB or more, past any size; write a size such as '512m' or '2g'")
    return size


def parse_port(spec: str) -> dict[str, object]:
    """Parses a docker-style port: "8080:80", "127.0.0.1:8080:80/udp", "unix:/path.sock:2375",
    or, for a host port the host picks, "80", "127.0.0.1::80"."""
    if spec.startswith("unix:"):
        path, _, guest = spec[len("unix:") :].rpartition(":")
        if not path or not guest.isdigit():
            raise errors.InvalidArgumentError(f"port {spec!r}: write unix:HOSTPATH:GUESTPORT")
        if int(guest) > 65535:
            raise errors.InvalidArgumentError(f"port {spec!r}: guest port {guest} is past 65535")
        return {"host_path": path, "guest_port": int(guest)}
    m = _PORT.match(spec)
    if not m:
        raise errors.InvalidArgumentError(f"port {spec!r}: write [IP:][HOSTPORT:]GUESTPORT[/tcp|/udp] or unix:HOSTPATH:GUESTPORT")
    out: dict[str, object] = {"host_port": int(m["host"] or 0), "guest_port": int(m["guest"])}
    for which in ("host", "guest"):
        if int(m[which] or 0) > 65535:
            raise errors.InvalidArgumentError(f"port {spec!r}: {which} port {m[which]} is past 65535")
    if m["ip"]:
        out["host_ip"] = m["ip"].strip("[]")
    if m["proto"]:
        out["protocol"] = m["proto"]
    return out


def _cpu_list(cpuset: object) -> list[int]:
    want = "a list of CPU numbers such as [0, 1]"
    out = []
    for c in _items("cpuset", cpuset, want):
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise errors.InvalidArgumentError(f"cpuset: {c!r} is not a CPU number (0, 1, …); give {want}")
        out.append(c)
    return out


def _mounts(mounts: object) -> list[dict[str, object]]:
    out = []
    for m in _items("mounts", mounts, "a list of gvx.Mount"):
        if not isinstance(m, Mount):
            raise errors.InvalidArgumentError(f"mounts: {m!r} is {_kind(m)}; give gvx.Mount(volume_path, target)")
        out.append(m._json())
    return out


_VOLUMES_WANT = "{'data.ext4': '/data'} or ['data.ext4:/data', 'golden.ext4:/var/lib/docker:ro']"


def _volumes(volumes: object) -> list[dict[str, object]]:
    """docker's ``volumes`` for ext4 image files: a mapping of image file to
    target, or to docker-py's {"bind": target, "mode": "ro"}, or a list of
    "FILE:TARGET[:ro|rw]" strings. A directory is refused here, by the
    argument's name: docker users give one first, and rungv's error would name
    mounts[N]."""
    if volumes is None:
        return []
    out = []
    if isinstance(volumes, Mapping):
        for source, target in volumes.items():
            out.append(_volume(source, *_volume_target(source, target)))
        return out
    for item in _items("volumes", volumes, f"a mapping or a list such as {_VOLUMES_WANT}"):
        if isinstance(item, Mount):
            raise errors.InvalidArgumentError(f"volumes: {item!r:.60} is a gvx.Mount; give it in mounts=[...], or volumes= as {_VOLUMES_WANT}")
        if not isinstance(item, str):
            raise errors.InvalidArgumentError(f"volumes: {item!r:.60} is {_kind(item)}; give 'FILE:/PATH' strings such as {_VOLUMES_WANT}")
        out.append(_volume_string(item))
    return out


def _volume_target(source: object, target: object) -> tuple[object, bool]:
    """A volumes mapping's value: the target, and whether it is read-only."""
    if isinstance(target, str):
        return target, False
    if isinstance(target, Mapping) and "bind" in target and set(target) <= {"bind", "mode"}:
        mode = target.get("mode", "rw")
        if mode not in ("ro", "rw"):
            raise errors.InvalidArgumentError(f"volumes[{source!r}]: mode {mode!r}: give 'ro' or 'rw', as in {{'bind': '/data', 'mode': 'ro'}}")
        return target["bind"], mode == "ro"
    raise errors.InvalidArgumentError(
        f"volumes[{source!r}]: {target!r:.60} is not a target; give an absolute path such as '/data', or {{'bind': '/data', 'mode': 'ro'}}"
    )


def _volume_string(item: str) -> dict[str, object]:
    """One "FILE:TARGET[:ro|rw]". FILE may hold ':'; TARGET starts with '/'."""
    if ":" not in item:
        raise errors.InvalidArgumentError(f"volumes: {item!r} names no target; write 'FILE:/PATH' such as 'data.ext4:/data'")
    rest, _, last = item.rpartition(":")
    read_only = False
    if not last.startswith("/"):
        if last not in ("ro", "rw") or ":" not in rest:
            raise errors.InvalidArgumentError(
                f"volumes: {item!r} is not 'FILE:/PATH' or 'FILE:/PATH:ro'; write one such as 'golden.ext4:/var/lib/docker:ro'"
            )
        read_only = last == "ro"
        rest, _, last = rest.rpartition(":")
    return _volume(rest, last, read_only)


def _volume(source: object, target: object, read_only: bool) -> dict[str, object]:
    if isinstance(source, str) and not source:
        raise errors.InvalidArgumentError(f"volumes: no file before {target!r}; write 'FILE:/PATH' such as 'data.ext4:/data'")
    if not isinstance(source, (str, os.PathLike)):
        raise _bad("volumes", "host files (str or os.PathLike) as keys, such as {'data.ext4': '/data'}; for a gvx.Volume, its .path", source)
    path = _path("volumes", source)
    if os.path.isdir(path):
        raise errors.InvalidArgumentError(
            f"volumes: {path!r} is a directory; a volume is an ext4 image file (gvx.Volume.create(path, '16g'), "
            "or a missing file, made 16G and sparse), and a sandbox never sees host directories: "
            "copy one in with Sandbox.upload(directory, target)"
        )
    where = _absolute(f"volumes[{path!r}]", target, "/data")
    return Mount(path, where, read_only)._json()


def sandbox_config(
    image: object,
    *,
    env: object = None,
    workdir: object = None,
    user: object = None,
    hostname: object = None,
    memory: object = None,
    cpus: object = None,
    cpuset: object = None,
    pids_limit: object = None,
    network: object = "none",
    ports: object = (),
    allow_net: object = (),
    host_loopback: object = False,
    net_raw: object = False,
    nftables: object = False,
    mounts: object = (),
    volumes: object = None,
    timeout: object = None,
    platform: object = "auto",
    spin: object = None,
    cache: object = None,
    rungv: object = None,
    insecure: object = False,
    restore: object = None,
) -> dict[str, object]:
    """gvx_sandbox_new's config for gvx.Sandbox's arguments, checked. ``image``
    and ``rungv`` are left out when None, for the caller to fill in (finding
    the defaults touches the file system, which checking alone need not)."""
    config: dict[str, object] = {
        # A restored sandbox continues the snapshot's own init.
        "keep_alive": restore is None,
        "env": env_list("env", env),
        "platform": _str("platform", platform, "'auto', 'systrap', 'kvm' or 'ptrace'"),
        "network": _str("network", network, "'none', 'nat' or 'sandbox'"),
        "ports": [parse_port(p) for p in _str_list("ports", ports, "['8080:80']")],
        "allow_net": _str_list("allow_net", allow_net, "['10.0.0.0/8:443']"),
        "host_loopback": _flag("host_loopback", host_loopback),
        "net_raw": _flag("net_raw", net_raw),
        "nftables": _flag("nftables", nftables),
        "mounts": _mounts(mounts) + _volumes(volumes),
        "insecure": _flag("insecure", insecure),
    }
    if image is not None:
        config["image"] = _str("image", image, "an image reference such as 'python:3.12' or 'oci:DIR:latest', or None")
    if spin is not None:
        config["spin"] = _flag("spin", spin)
    if workdir is not None:
        config["workdir"] = _absolute("workdir", workdir, "/workspace")
    if user is not None:
        config["user"] = _str("user", user, "a user such as 'agent', '1000' or '1000:1000'")
    if hostname is not None:
        config["hostname"] = _str("hostname", hostname)
    if memory is not None:
        config["memory"] = parse_size(memory, "memory")
    if cpus is not None:
        if isinstance(cpus, bool) or not isinstance(cpus, (int, float)):
            raise _bad("cpus", "a number of CPUs such as 2 or 0.5", cpus)
        if not math.isfinite(cpus) or cpus < 0:
            raise errors.InvalidArgumentError(f"cpus={cpus!r}: give a number of CPUs such as 2 or 0.5, or None for the host's")
        config["cpus"] = float(cpus)
    if cpuset is not None:
        config["cpuset"] = _cpu_list(cpuset)
    if pids_limit is not None:
        limit = _count("pids_limit", pids_limit, "a count of tasks (int), or 0 or -1 for no limit")
        if limit < -1:
            raise errors.InvalidArgumentError(f"pids_limit={limit}: give a count of tasks, or 0 or -1 for no limit")
        # 0 is no limit too, as docker run takes it; the config's 0 is the default.
        config["pids_limit"] = limit if limit > 0 else -1
    if timeout is not None:
        config["timeout"] = _seconds("timeout", timeout)
    if cache is not None:
        config["cache"] = _path("cache", cache)
    if rungv is not None:
        config["rungv"] = _path("rungv", rungv)
    if restore is not None:
        config["restore"] = _path("restore", restore)
    return config


def check_sandbox_options(where: str, image: object, options: Mapping[str, object]) -> None:
    """Checks gvx.Sandbox arguments that are kept to start sandboxes later
    (GvxEnv's), so that a bad one is refused at once rather than on a worker
    thread at the first reset."""
    known = [p for p in inspect.signature(sandbox_config).parameters if p != "image"]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise errors.InvalidArgumentError(f"{where}: unknown gvx.Sandbox options {unknown}; gvx.Sandbox takes {known}")
    sandbox_config(image, **options)


class CommandOptions(TypedDict, total=False):
    """The keywords of Sandbox.exec and Sandbox.spawn that say what runs. Each
    is a key of their request JSON (core/spec's Exec) and has its check in
    _EXEC_CHECKS: a new exec option is a line in each. Both methods and their
    gvx.aio twins take them as ``**options`` and show them in their
    signatures (takes_options). None leaves an option unset."""

    timeout: Optional[float]
    env: Union[Mapping[str, str], Sequence[str], None]
    cwd: Optional[str]
    user: Optional[str]
    umask: Optional[int]  # the command's file mode creation mask, such as 0o077; None: 0o022
    stderr_to_stdout: Optional[bool]  # True: stderr is stdout's pipe, merged in order as 2>&1 (stderr "")


class ExecOptions(CommandOptions, total=False):
    """Sandbox.exec's keywords: CommandOptions and how much output it keeps
    ("max_output" of gvx_sandbox_exec's request)."""

    max_output: Optional[int]


def _cwd(name: str, value: object) -> str:
    return _absolute(name, value, "/workspace")


def _user(name: str, value: object) -> str:
    return _str(name, value, "a user such as 'agent', '1000' or '1000:1000'")


def _max_output(name: str, value: object) -> int:
    limit = _count(name, value, "a number of bytes (int), or None for all of it")
    if limit < 0:
        raise errors.InvalidArgumentError(f"{name}={limit}: must not be negative; give bytes, or None for all of it")
    return limit


def _umask(name: str, value: object) -> int:
    mask = _count(name, value, "a file mode mask (int) such as 0o077, or None for 0o022")
    if not 0 <= mask <= 0o777:
        raise errors.InvalidArgumentError(f"{name}={mask:#o}: not a file mode mask; give 0 to 0o777, such as 0o077, or None for 0o022")
    return mask


# ExecOptions' checks: each turns a keyword's value (not None) into its JSON.
_EXEC_CHECKS: dict[str, Callable[[str, object], object]] = {
    "timeout": _seconds,
    "env": env_list,
    "cwd": _cwd,
    "user": _user,
    "max_output": _max_output,
    "umask": _umask,
    "stderr_to_stdout": _flag,
}

_F = TypeVar("_F", bound=Callable[..., Any])


def takes_options(options: type) -> Callable[[_F], _F]:
    """Shows the keywords of the TypedDict options in fn's signature, for
    help(), inspect and editors that read it, in place of fn's ``**options``."""

    def show(fn: _F) -> _F:
        sig = inspect.signature(fn)
        kw = inspect.Parameter.KEYWORD_ONLY
        own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        first_kw = next((i for i, p in enumerate(own) if p.kind is kw), len(own))
        declared = [
            inspect.Parameter(name, kw, default=None, annotation=t.__forward_arg__ if isinstance(t, ForwardRef) else t)
            for name, t in options.__annotations__.items()
        ]
        setattr(fn, "__signature__", sig.replace(parameters=own[:first_kw] + declared + own[first_kw:]))
        return fn

    return show


takes_exec_options = takes_options(ExecOptions)
takes_command_options = takes_options(CommandOptions)


@dataclass(frozen=True)
class ExecRequest:
    """gvx_sandbox_exec's request, checked, and what goes beside it."""

    request: dict[str, object]
    stdin: Optional[bytes]
    on_output: Optional[Callable[[str, bytes], None]]


def command_request(cmd: object, options: Mapping[str, object], method: str = "spawn", others: str = "") -> dict[str, object]:
    """The request JSON of a command: cmd and its options, checked against
    the keywords ``method`` takes (CommandOptions, or ExecOptions for exec)."""
    allowed = ExecOptions.__annotations__ if method == "exec" else CommandOptions.__annotations__
    for name in options:
        if name not in allowed:
            raise TypeError(f"{method}() got an unexpected keyword argument {name!r}; it takes {sorted(allowed)}{others}")
    want = "a shell string or a non-empty list of str"
    if isinstance(cmd, str):
        argv = ["/bin/sh", "-c", cmd]
    else:
        items = _items("cmd", cmd, want)
        if not items:
            raise errors.InvalidArgumentError(f"cmd={cmd!r}: empty; give {want}")
        argv = []
        for a in items:
            if not isinstance(a, str):
                raise errors.InvalidArgumentError(f"cmd={cmd!r:.60}: {a!r} is {_kind(a)}; give {want}")
            argv.append(a)
    request: dict[str, object] = {"argv": argv}
    for name, value in options.items():
        if value is not None:
            request[name] = _EXEC_CHECKS[name](name, value)
    return request


def exec_request(cmd: object, stdin: object, on_output: object, options: Mapping[str, object]) -> ExecRequest:
    """Sandbox.exec's arguments, checked; options are its ExecOptions."""
    request = command_request(cmd, options, "exec", ", stdin, check and on_output")
    data: Optional[bytes]
    if stdin is None:
        data = None
    elif isinstance(stdin, str):
        data = stdin.encode()
    elif isinstance(stdin, (bytes, bytearray, memoryview)):
        data = bytes(stdin)
    else:
        raise _bad("stdin", "bytes or str, or None for no input", stdin)
    if on_output is not None and not callable(on_output):
        raise _bad("on_output", "a function on_output(stream, data), or None", on_output)
    return ExecRequest(request, data, cast(Optional[Callable[[str, bytes], None]], on_output))
