# SPDX-License-Identifier: MIT
"""The ctypes mirror of include/fatune.h (python/fatune/_abi.py) against the
header itself, on the CPU: a C program compiled against the header prints the
size and alignment of every struct and the offset and size of every field,
and the value of every enumerator of the enums the binding mirrors; these must
equal ctypes' figures. The header is also read for its struct fields, in
order, and its FAT_API functions, so that a field, an enumerator or a function
added to the header without its mirror fails here rather than as a crash.
Needs a C compiler ($CC, else cc); exits 77 (skipped) without one. No PyTorch,
no GPU, no libfatune.

    python3 python/tests/test_struct_layout.py [INCLUDE_DIR [SOVERSION]]

With SOVERSION (FATUNE_SOVERSION, as ctest passes it), _abi.SONAME must be
libfatune.so.SOVERSION; _abi.VERSION must be the header's version.
"""
import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
INCLUDE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "include")
HEADER = os.path.join(INCLUDE, "fatune.h")


def load(name, *path):
    """The module at ROOT/PATH, by its path: _abi.py's package __init__ is
    the binding, and the header reader is tests/abi_layout.py's."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, *path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


abi = load("fatune_abi", "python", "fatune", "_abi.py")
header_declarations = load("fatune_abi_layout", "tests", "abi_layout.py").header_declarations

failures = 0


def expect(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def c_program(structs, enums):
    """A C program printing "struct NAME SIZE ALIGN", "field NAME.F OFFSET SIZE"
    and "enum NAME VALUE" lines for the header's own declarations."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "fatune.h"', "int main(void) {"]
    for s, fields in structs.items():
        lines.append(f'  printf("struct {s} %zu %zu\\n", sizeof({s}), _Alignof({s}));')
        for f in fields:
            lines.append(f'  printf("field {s}.{f} %zu %zu\\n", offsetof({s}, {f}), '
                         f'sizeof((({s} *)0)->{f}));')
    for e in enums:
        for v in abi.ENUMS.get(e, {}):
            lines.append(f'  printf("enum {v} %d\\n", (int){v});')
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


cc = os.environ.get("CC") or "cc"
if not shutil.which(cc):
    print(f"skipped: no C compiler ({cc})")
    sys.exit(SKIP)
with open(HEADER) as f:
    structs, enums, functions = header_declarations(f.read())
mirrored = {cls.__name__: cls for cls in abi.STRUCTS}
expect(set(structs) == set(mirrored),
       f"structs in fatune.h {sorted(structs)}, in _abi.py {sorted(mirrored)}")
for e, values in abi.ENUMS.items():
    expect(enums.get(e) == list(values), f"enum {e}: fatune.h has {enums.get(e)}, _abi.py {list(values)}")
expect(set(functions) == set(abi.PROTOTYPES),
       f"functions only in fatune.h {sorted(set(functions) - set(abi.PROTOTYPES))}, "
       f"only in _abi.py {sorted(set(abi.PROTOTYPES) - set(functions))}")
for fn, (_, params) in sorted(functions.items()):
    if fn in abi.PROTOTYPES:
        n, got = len(params), len(abi.PROTOTYPES[fn][1])
        expect(got == n, f"{fn}: {n} parameters in fatune.h, {got} in _abi.py")

with tempfile.TemporaryDirectory(prefix="fatune_layout_") as tmp:
    src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
    with open(src, "w") as f:
        f.write(c_program(structs, enums))
    r = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", INCLUDE, "-o", exe, src],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL: {cc} could not compile the layout program:\n{r.stderr}")
        sys.exit(1)
    out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout

c_struct, c_field, c_enum = {}, {}, {}
for line in out.splitlines():
    kind, name, *nums = line.split()
    {"struct": c_struct, "field": c_field, "enum": c_enum}[kind][name] = tuple(int(x) for x in nums)

for s, fields in structs.items():
    cls = mirrored.get(s)
    if cls is None:
        continue
    names = [f[0] for f in cls._fields_]
    only_c, only_py = [f for f in fields if f not in names], [f for f in names if f not in fields]
    expect(not only_c and not only_py, f"{s}: fields only in fatune.h {only_c}, only in _abi.py {only_py}")
    expect(only_c or only_py or names == fields, f"{s}: field order {fields} in fatune.h, {names} in _abi.py")
    size, align = c_struct[s]
    expect((size, align) == (ctypes.sizeof(cls), ctypes.alignment(cls)),
           f"{s}: size {size} align {align} in C, size {ctypes.sizeof(cls)} align "
           f"{ctypes.alignment(cls)} in ctypes")
    for f in fields:
        if f not in names:
            continue
        offset, fsize = c_field[f"{s}.{f}"]
        got = getattr(cls, f)
        expect((offset, fsize) == (got.offset, got.size),
               f"{s}.{f}: offset {offset} size {fsize} in C, offset {got.offset} size {got.size} "
               "in ctypes")
    print(f"{s}: {len(fields)} fields, {size} bytes")
for e, values in abi.ENUMS.items():
    for v, want in values.items():
        got = c_enum.get(v, (None,))[0]
        expect(got == want, f"{v} is {got} in C, {want} in _abi.py")
print(f"{len(functions)} functions, {sum(len(v) for v in abi.ENUMS.values())} enumerators")
with open(HEADER) as f:
    header_text = f.read()
version = tuple(int(re.search(rf"#define FATUNE_VERSION_{part} (\d+)", header_text).group(1))
                for part in ("MAJOR", "MINOR", "PATCH"))
expect(tuple(abi.VERSION) == version, f"_abi.VERSION {abi.VERSION}, fatune.h's version {version}")
if len(sys.argv) > 2:
    expect(abi.SONAME == f"libfatune.so.{sys.argv[2]}",
           f"_abi.SONAME {abi.SONAME}, the build's soname libfatune.so.{sys.argv[2]}")

print("struct layout:", "FAILED" if failures else "ok", f"({failures} failures)")
sys.exit(1 if failures else 0)
