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

    python3 python/tests/test_struct_layout.py [INCLUDE_DIR]
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

# _abi.py by its path, not through the package: its __init__ is the binding.
spec = importlib.util.spec_from_file_location("fatune_abi", os.path.join(ROOT, "python", "fatune", "_abi.py"))
abi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(abi)

failures = 0


def expect(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def header_declarations(text):
    """{struct: [field, ...]}, {enum: [enumerator, ...]}, {function: n_params}
    of the header, from its text without comments."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    structs = {}
    for name, body, alias in re.findall(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        assert name == alias, f"struct {name} typedef'd as {alias}"
        fields = []
        for decl in filter(None, (d.strip() for d in body.split(";"))):
            # "long long a, b, c" / "char v[128]" / "const char *const *t": each
            # declarator's name is its last identifier once array bounds are gone.
            for piece in re.sub(r"\[[^\]]*\]", "", decl).split(","):
                fields.append(re.findall(r"\w+", piece)[-1])
        structs[name] = fields
    enums = {}
    for name, body, alias in re.findall(r"typedef\s+enum\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        enums[name] = [re.match(r"\s*(\w+)", e).group(1) for e in body.split(",") if e.strip()]
    functions = {}
    for name, params in re.findall(r"FAT_API\s[^;{}]*?(\w+)\s*\(([^)]*)\)\s*;", text):
        functions[name] = 0 if params.strip() in ("", "void") else params.count(",") + 1
    return structs, enums, functions


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
for fn, n in sorted(functions.items()):
    if fn in abi.PROTOTYPES:
        got = len(abi.PROTOTYPES[fn][1])
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

print("struct layout:", "FAILED" if failures else "ok", f"({failures} failures)")
sys.exit(1 if failures else 0)
