# SPDX-License-Identifier: MIT
"""The ctypes mirror of include/fatune.h (python/fatune/_abi.py) against the
header itself, on the CPU: a C program compiled against the header
(tests/abi_layout.py's) measures the size and alignment of every struct and
the offset and size of every field, and the value of every enumerator; the
binding's enums and ctypes' figures must equal them. The header is also read
for its struct fields, in order, and its FAT_API functions, so that a field,
an enumerator or a function added to the header without its mirror fails
here rather than as a crash; and _abi.py's SONAME and VERSION must be the
build's. Needs a C compiler ($CC, else cc): skipped without one. No PyTorch,
no GPU, no libfatune.

    python3 -m pytest python/tests/test_struct_layout.py
    python3 python/tests/test_struct_layout.py [INCLUDE_DIR [SOVERSION]]

As a script (ctest's way) it exits 77 (skipped) without a compiler;
SOVERSION defaults to CMakeLists.txt's FATUNE_SOVERSION.
"""
import ctypes
import importlib.util
import os
import re
import sys

SKIP = 77
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
INCLUDE = os.path.join(ROOT, "include")
try:
    import pytest
except ImportError:
    pytest = None


def load(name, *path):
    """The module at ROOT/PATH, by its path: _abi.py's package __init__ is
    the binding, and the header reader is tests/abi_layout.py's."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, *path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


abi = load("fatune_abi", "python", "fatune", "_abi.py")
layout = load("fatune_abi_layout", "tests", "abi_layout.py")


def soversion():
    """FATUNE_SOVERSION as CMakeLists.txt sets it."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"^set\(FATUNE_SOVERSION (\d+)\)", f.read(), re.M).group(1)


_measured = {}
_script = False    # run as a script (main), not by pytest
_soversion = None  # main's SOVERSION argument


def measured():
    """((structs, enums, functions), {"struct S": (size, align), "field S.f":
    (offset, size), "enum V": (value,)}) of the header in INCLUDE, compiled
    once; skips (pytest) or exits 77 (script) without a compiler."""
    if INCLUDE not in _measured:
        cc = layout.compiler()
        if not cc:
            if pytest is not None and not _script:
                pytest.skip("no C compiler ($CC or cc)")
            print("skipped: no C compiler ($CC or cc)")
            sys.exit(SKIP)
        decls, lines = layout.measure(INCLUDE, cc)
        figures = {}
        for line in lines:
            words = line.split()
            figures[f"{words[0]} {words[1]}"] = tuple(int(w) for w in words[2:] if w.lstrip("-").isdigit())
        _measured[INCLUDE] = decls, figures
    return _measured[INCLUDE]


def test_structs_mirrored():
    (structs, _, _), figures = measured()
    mirrored = {cls.__name__: cls for cls in abi.STRUCTS}
    assert set(structs) == set(mirrored), \
        f"structs in fatune.h {sorted(structs)}, in _abi.py {sorted(mirrored)}"
    problems = []
    for s, fields in structs.items():
        cls = mirrored[s]
        names = [f[0] for f in cls._fields_]
        if names != fields:
            problems.append(f"{s}: fields {fields} in fatune.h, {names} in _abi.py")
            continue
        size, align = figures[f"struct {s}"]
        if (size, align) != (ctypes.sizeof(cls), ctypes.alignment(cls)):
            problems.append(f"{s}: size {size} align {align} in C, size {ctypes.sizeof(cls)} align "
                            f"{ctypes.alignment(cls)} in ctypes")
        for f in fields:
            offset, fsize = figures[f"field {s}.{f}"]
            got = getattr(cls, f)
            if (offset, fsize) != (got.offset, got.size):
                problems.append(f"{s}.{f}: offset {offset} size {fsize} in C, offset {got.offset} "
                                f"size {got.size} in ctypes")
        print(f"{s}: {len(fields)} fields, {size} bytes")
    assert not problems, "\n".join(problems)


def test_struct_size_set_on_construction():
    """Every mirrored struct is a public one, with struct_size first, which
    constructing it sets (as the C header's _INIT macros do)."""
    for cls in abi.STRUCTS:
        assert cls._fields_[0][0] == "struct_size", f"{cls.__name__} does not start with struct_size"
        assert cls().struct_size == ctypes.sizeof(cls), f"{cls.__name__}() has struct_size {cls().struct_size}"
    assert abi.fat_attn_bwd_args().fwd.struct_size == ctypes.sizeof(abi.fat_attn_args)


def test_enums_mirrored():
    (_, enums, _), figures = measured()
    for e, values in abi.ENUMS.items():
        assert enums.get(e) == list(values), f"enum {e}: fatune.h has {enums.get(e)}, _abi.py {list(values)}"
        for v, want in values.items():
            got = figures[f"enum {v}"][0]
            assert got == want, f"{v} is {got} in C, {want} in _abi.py"


def test_functions_mirrored():
    (_, _, functions), _ = measured()
    assert set(functions) == set(abi.PROTOTYPES), (
        f"functions only in fatune.h {sorted(set(functions) - set(abi.PROTOTYPES))}, "
        f"only in _abi.py {sorted(set(abi.PROTOTYPES) - set(functions))}")
    for fn, (_, params) in sorted(functions.items()):
        got = len(abi.PROTOTYPES[fn][1])
        assert got == len(params), f"{fn}: {len(params)} parameters in fatune.h, {got} in _abi.py"
    print(f"{len(functions)} functions")


def test_version_and_soname():
    with open(os.path.join(INCLUDE, "fatune.h")) as f:
        text = f.read()
    version = tuple(int(re.search(rf"#define FATUNE_VERSION_{part} (\d+)", text).group(1))
                    for part in ("MAJOR", "MINOR", "PATCH"))
    assert tuple(abi.VERSION) == version, f"_abi.VERSION {abi.VERSION}, fatune.h's version {version}"
    want = f"libfatune.so.{_soversion or soversion()}"
    assert abi.SONAME == want, f"_abi.SONAME {abi.SONAME}, the build's soname {want}"


TESTS = (test_structs_mirrored, test_struct_size_set_on_construction, test_enums_mirrored,
         test_functions_mirrored, test_version_and_soname)


def main(argv):
    global INCLUDE, _soversion, _script
    _script = True
    if argv:
        INCLUDE = argv[0]
    if len(argv) > 1:
        _soversion = argv[1]
    failures = 0
    for t in TESTS:
        try:
            t()
        except AssertionError as e:
            failures += 1
            print(f"FAIL: {t.__name__}: {e}")
    print("struct layout:", "FAILED" if failures else "ok", f"({failures} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
