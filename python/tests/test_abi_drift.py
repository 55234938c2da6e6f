"""capi/gvx.h against what Python binds: the functions, their types, the constants.

The header is the contract; gvx._ffi copies it by hand. These checks parse the
header (our own, so a small parser does) and fail when the copy drifts:

- every prototype's types, mapped to ctypes by the rule gvx._ffi's docstring
  states, equal ``_ffi.SIGNATURES`` (same names, same arity, same types);
- every integer ``#define`` is in gvx._ffi under its own name with the
  header's value, and every ``GVX_E_*`` status raises an exception of its own
  (``gvx.errors.status_classes``);
- the header's functions are exactly what build/libgvx.so exports.

ctypes compares types by what they are on this machine: ``size_t`` and
``uint64_t`` are both ``c_ulong`` on x86-64, as ``int`` and ``int32_t`` are both
``c_int``, so a swap between such a pair is not seen here (nor does it change
the ABI here).
"""

from __future__ import annotations

import ast
import ctypes
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import pytest

from gvx import _ffi, errors

HEADER = Path(__file__).resolve().parents[2] / "capi" / "gvx.h"

CType = Union[type["ctypes._CData"], None]

# The C types of gvx.h and their ctypes twins (see gvx._ffi's docstring).
SCALARS: dict[str, type["ctypes._CData"]] = {
    "int": ctypes.c_int,
    "int32_t": ctypes.c_int32,
    "uint32_t": ctypes.c_uint32,
    "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
}
# What a single pointer to each non-integer type is.
POINTERS: dict[str, type["ctypes._CData"]] = {
    "char": ctypes.c_char_p,
    "uint8_t": ctypes.POINTER(ctypes.c_uint8),
    "void": ctypes.c_void_p,
}

# #defines gvx._ffi need not have, each with why. (Empty: Python uses them all.)
DEFINES_NOT_IN_FFI: dict[str, str] = {}


@dataclass(frozen=True)
class Param:
    base: str  # the type without const and pointers: "char", "uint64_t", "gvx_output_fn"
    pointers: int  # how many '*'


@dataclass(frozen=True)
class Prototype:
    name: str
    result: Param
    params: tuple[Param, ...]


@dataclass(frozen=True)
class Header:
    functions: dict[str, Prototype]
    callbacks: dict[str, Prototype]  # typedef'd function pointer types
    defines: dict[str, int]


def _int_expr(text: str) -> Optional[int]:
    """The value of an integer #define (``(-1)``, ``(1u << 16)``), or None for
    one that is not an integer (an include guard)."""
    text = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", text.strip())
    if not text:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp):
            ops = {ast.LShift: int.__lshift__, ast.BitOr: int.__or__, ast.Add: int.__add__, ast.Sub: int.__sub__}
            for op, fn in ops.items():
                if isinstance(node.op, op):
                    return fn(value(node.left), value(node.right))
        raise ValueError(f"not an integer expression the test knows: {text!r}")

    return value(tree.body)


def _param(text: str, named: bool) -> Param:
    """A declaration's type: ``const uint8_t *data`` -> Param("uint8_t", 1)."""
    words = re.findall(r"\w+|\*", text)
    if named:
        if len(words) < 2 or words[-1] == "*":
            raise ValueError(f"parameter without a name in gvx.h: {text!r}")
        words = words[:-1]
    pointers = words.count("*")
    base = " ".join(w for w in words if w not in ("*", "const"))
    return Param(base, pointers)


def _params(text: str) -> tuple[Param, ...]:
    text = text.strip()
    if text in ("", "void"):
        return ()
    return tuple(_param(p, named=True) for p in text.split(","))


def parse_header(text: str) -> Header:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"#ifdef __cplusplus.*?#endif", " ", text, flags=re.S)
    defines: dict[str, int] = {}
    code = []
    for line in text.splitlines():
        m = re.match(r"\s*#\s*define\s+(\w+)(.*)$", line)
        if m:
            v = _int_expr(m.group(2))
            if v is not None:
                defines[m.group(1)] = v
        elif not line.lstrip().startswith("#"):
            code.append(line)
    functions: dict[str, Prototype] = {}
    callbacks: dict[str, Prototype] = {}
    statements = " ".join(code).split(";")
    for statement in statements[:-1]:
        s = " ".join(statement.split())
        m = re.fullmatch(r"typedef ([\w\s\*]+?) ?\( ?\* ?(\w+) ?\) ?\((.*)\)", s)
        if m:
            callbacks[m.group(2)] = Prototype(m.group(2), _param(m.group(1), named=False), _params(m.group(3)))
            continue
        m = re.fullmatch(r"([\w\s\*]+?) ?\b(gvx_\w+) ?\((.*)\)", s)
        if not m:
            raise AssertionError(f"gvx.h has a declaration this test does not parse; teach it: {s!r}")
        functions[m.group(2)] = Prototype(m.group(2), _param(m.group(1), named=False), _params(m.group(3)))
    if statements[-1].strip():
        raise AssertionError(f"gvx.h ends with an unfinished declaration: {statements[-1].strip()!r}")
    return Header(functions, callbacks, defines)


def ctypes_of(p: Param, callbacks: dict[str, Prototype]) -> CType:
    """The ctypes type gvx._ffi's convention gives a C type."""
    if p.pointers == 0:
        if p.base == "void":
            return None
        if p.base in SCALARS:
            return SCALARS[p.base]
        if p.base in callbacks:
            cb = callbacks[p.base]
            args = [ctypes_of(a, callbacks) for a in cb.params]
            return ctypes.CFUNCTYPE(ctypes_of(cb.result, callbacks), *[a for a in args if a is not None])
        raise AssertionError(f"gvx.h uses the type {p.base!r}, which this test does not map; add it to SCALARS or POINTERS")
    if p.pointers >= 2:
        return ctypes.POINTER(ctypes.c_void_p)  # a string or buffer libgvx returns: freed with gvx_free
    if p.base in POINTERS:
        return POINTERS[p.base]
    if p.base in SCALARS:
        return ctypes.POINTER(SCALARS[p.base])
    raise AssertionError(f"gvx.h has a pointer to {p.base!r}, which this test does not map")


def describe(t: CType) -> str:
    """A ctypes type as text, so that a mismatch reads as one."""
    if t is None:
        return "None"
    if hasattr(t, "_argtypes_") and hasattr(t, "_restype_"):  # a CFUNCTYPE
        restype: CType = getattr(t, "_restype_")
        parts = [describe(restype)] + [describe(a) for a in getattr(t, "_argtypes_")]
        return f"CFUNCTYPE({', '.join(parts)})"
    pointee = getattr(t, "_type_", None)
    if isinstance(pointee, type):
        return f"POINTER({describe(pointee)})"
    return t.__name__


def header() -> Header:
    return parse_header(HEADER.read_text())


def test_parser_reads_the_header() -> None:
    """The checks below are only as good as the parse: it finds what gvx.h has."""
    h = header()
    assert len(h.functions) >= 25, sorted(h.functions)
    assert set(h.callbacks) == {"gvx_output_fn", "gvx_progress_fn"}
    exec_ = h.functions["gvx_sandbox_exec"]
    assert exec_.result == Param("int", 0)
    assert exec_.params[2] == Param("uint8_t", 1) and exec_.params[5] == Param("uint8_t", 2)
    assert h.functions["gvx_free"].result == Param("void", 0)
    assert {"GVX_OK", "GVX_E_INVALID", "GVX_STDOUT", "GVX_WRITE_MAKE_PARENTS", "GVX_CHECKPOINT_STOP"} <= set(h.defines)
    assert "GVX_H" not in h.defines  # the include guard has no value
    assert _int_expr(" (-10)  /* why */".split("/*")[0]) == -10
    assert _int_expr("(1u << 16)") == 1 << 16
    assert _int_expr("") is None


def test_signatures_match_the_header() -> None:
    h = header()
    declared, bound = set(h.functions), set(_ffi.SIGNATURES)
    assert declared == bound, (
        f"gvx.h and gvx._ffi.SIGNATURES differ: only in gvx.h {sorted(declared - bound)}, "
        f"only in SIGNATURES {sorted(bound - declared)}; bind each function gvx.h declares, and only those"
    )
    wrong = []
    for name, proto in h.functions.items():
        restype, argtypes = _ffi.SIGNATURES[name]
        want = [describe(ctypes_of(proto.result, h.callbacks))] + [describe(ctypes_of(p, h.callbacks)) for p in proto.params]
        have = [describe(restype)] + [describe(a) for a in argtypes]
        if want != have:
            wrong.append(f"{name}: gvx.h says {want[0]} ({', '.join(want[1:])}), SIGNATURES {have[0]} ({', '.join(have[1:])})")
    assert not wrong, "gvx._ffi.SIGNATURES drifted from gvx.h:\n" + "\n".join(wrong)


def test_loaded_functions_carry_the_signatures() -> None:
    """What ctypes calls with is the table, not a default of int arguments."""
    lib = _ffi.lib()
    for name, (restype, argtypes) in _ffi.SIGNATURES.items():
        fn = getattr(lib, name)
        assert fn.restype is restype and list(fn.argtypes) == argtypes, name


def test_constants_match_the_header() -> None:
    h = header()
    missing = sorted(set(h.defines) - set(DEFINES_NOT_IN_FFI) - set(vars(_ffi)))
    assert not missing, f"gvx.h defines {missing}, which gvx._ffi lacks: add them under the same names"
    wrong = {
        name: (value, getattr(_ffi, name)) for name, value in h.defines.items() if hasattr(_ffi, name) and getattr(_ffi, name) != value
    }
    assert not wrong, f"gvx._ffi's constants differ from gvx.h ({{name: (gvx.h, _ffi)}}): {wrong}"
    stale = sorted(n for n in vars(_ffi) if re.fullmatch(r"GVX_[A-Z0-9_]+", n) and n not in h.defines)
    assert not stale, f"gvx._ffi has constants gvx.h does not define: {stale}"


def test_every_status_has_its_exception() -> None:
    h = header()
    statuses = {name: v for name, v in h.defines.items() if name.startswith("GVX_E_")}
    classes = errors.status_classes()
    missing = sorted(name for name, v in statuses.items() if v not in classes)
    assert not missing, f"gvx.h's statuses {missing} have no exception in gvx.errors.status_classes(): add a class for each"
    unknown = sorted(set(classes) - set(statuses.values()))
    assert not unknown, f"gvx.errors.status_classes() maps statuses gvx.h does not define: {unknown}"
    assert h.defines["GVX_OK"] not in classes
    for status, cls in classes.items():
        assert issubclass(cls, errors.GvxError) and cls is not errors.GvxError, status
    assert len(set(classes.values())) == len(classes), "two statuses raise the same exception"
    for name, v in statuses.items():
        assert type(errors.from_status(v, "m")) is classes[v], name


def test_header_functions_are_the_library_exports() -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed: the library's exports are not compared with gvx.h")
    library = _ffi.lib()._name
    out = subprocess.run([nm, "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
    exported = {f[2] for f in (line.split() for line in out.splitlines()) if len(f) == 3 and f[1] == "T" and f[2].startswith("gvx_")}
    declared = set(header().functions)
    assert declared == exported, (
        f"{library} and gvx.h differ: exported but not declared {sorted(exported - declared)}, "
        f"declared but not exported {sorted(declared - exported)}; rebuild with `make libgvx` or fix gvx.h"
    )
