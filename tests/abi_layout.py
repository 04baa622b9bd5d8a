# SPDX-License-Identifier: MIT
"""The ABI of include/fatune.h as text: every public struct's size and
alignment and each field's offset and size (measured by a C program compiled
against the header, so the compiler's layout is what is recorded), every
enumerator's value, and every FAT_API function's return and parameter types.
One record per soname lives in tests/data/abi/libfatune.so.N.layout;
test_abi_layout compares the header with the record of the soname the build
gives the library, and fails when they differ: a layout change needs a new
soname (FATUNE_SOVERSION in CMakeLists.txt), whose record is then written.

    python3 tests/abi_layout.py INCLUDE_DIR                 # the layout, to stdout
    python3 tests/abi_layout.py INCLUDE_DIR RECORD          # write it to RECORD
    python3 tests/abi_layout.py --check INCLUDE_DIR RECORD_DIR SOVERSION

Needs a C compiler ($CC, else cc): --check exits 77 (skipped) without one.
python/tests/test_struct_layout.py reads the header with header_declarations
from here.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def header_declarations(text):
    """{struct: [field, ...]}, {enum: [enumerator, ...]}, {function: (return
    type, [parameter type, ...])} of the header, from its text without
    comments, in the header's order."""
    text = strip_comments(text)
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
    for ret, name, params in re.findall(r"FAT_API\s([^;{}()]*?)\b(\w+)\s*\(([^)]*)\)\s*;", text):
        types = [] if params.strip() in ("", "void") else [param_type(p) for p in params.split(",")]
        functions[name] = (" ".join(ret.split()), types)
    return structs, enums, functions


def param_type(param):
    """"const fat_attn_args *args" -> "const fat_attn_args *": the type
    without the parameter's name, which is no part of the ABI."""
    p = " ".join(param.split())
    if len(re.findall(r"\w+|\*", p)) > 1:
        p = re.sub(r"\s*\b\w+$", "", p)
    return re.sub(r"\s*\*\s*", " *", p).replace("* *", "**").strip()


def c_program(structs, enums):
    """A C program printing "struct NAME size S align A", "field NAME.F offset
    O size S" and "enum NAME VALUE" lines for the header's declarations."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "fatune.h"', "int main(void) {"]
    for s, fields in structs.items():
        lines.append(f'  printf("struct {s} size %zu align %zu\\n", sizeof({s}), _Alignof({s}));')
        for f in fields:
            lines.append(f'  printf("field {s}.{f} offset %zu size %zu\\n", offsetof({s}, {f}), '
                         f'sizeof((({s} *)0)->{f}));')
    for values in enums.values():
        for v in values:
            lines.append(f'  printf("enum {v} %d\\n", (int){v});')
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


def compiler():
    cc = os.environ.get("CC") or "cc"
    return cc if shutil.which(cc) else None


def measure(include, cc):
    """The compiled program's output for the header in INCLUDE: the
    (structs, enums, functions) parsed and the measured lines."""
    with open(os.path.join(include, "fatune.h")) as f:
        structs, enums, functions = header_declarations(f.read())
    with tempfile.TemporaryDirectory(prefix="fatune_abi_") as tmp:
        src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
        with open(src, "w") as f:
            f.write(c_program(structs, enums))
        r = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", include, "-o", exe, src],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{cc} could not compile the layout program:\n{r.stderr}")
        out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    return (structs, enums, functions), out.splitlines()


def layout_text(include, cc, soname="libfatune.so.N"):
    """The record of the header in INCLUDE: measured lines, then one
    "function RET NAME(TYPES)" line per FAT_API function, by name."""
    (_, _, functions), lines = measure(include, cc)
    for name in sorted(functions):
        ret, types = functions[name]
        lines.append(f"function {ret} {name}({', '.join(types) or 'void'})".replace("* ", "*"))
    head = [f"# {soname}: the public ABI of include/fatune.h, written by tests/abi_layout.py;",
            "# a change of any line below needs a new soname (FATUNE_SOVERSION in CMakeLists.txt)."]
    return "\n".join(head + lines) + "\n"


def check(include, record_dir, soversion, cc):
    soname = f"libfatune.so.{soversion}"
    record = os.path.join(record_dir, f"{soname}.layout")
    now = layout_text(include, cc, soname)
    write = f"python3 tests/abi_layout.py include {os.path.relpath(record)}"
    if not os.path.exists(record):
        print(f"FAIL: no layout recorded for {soname} ({record}); a new soname's layout is written "
              f"with: {write}")
        return 1
    with open(record) as f:
        was = f.read()
    if was == now:
        print(f"abi layout: {soname} ok ({len(now.splitlines()) - 2} lines)")
        return 0
    old = [l for l in was.splitlines() if not l.startswith("#")]
    new = [l for l in now.splitlines() if not l.startswith("#")]
    print(f"FAIL: include/fatune.h's ABI differs from the layout recorded for {soname}:")
    for l in old:
        if l not in new:
            print(f"  recorded: {l}")
    for l in new:
        if l not in old:
            print(f"  header:   {l}")
    if [l for l in old if l in new] != [l for l in new if l in old]:
        print("  (and the order of lines differs)")
    print(f"A public struct's layout, an enum's values or a function's signature changed: bump "
          f"the soname (FATUNE_SOVERSION {soversion} in CMakeLists.txt), record the new one's "
          f"layout ({write.replace(soname, f'libfatune.so.{int(soversion) + 1}')}), and say so in "
          f"CHANGELOG.md.")
    return 1


def main(argv):
    cc = compiler()
    if argv[:1] == ["--check"] and len(argv) == 4:
        if not cc:
            print("skipped: no C compiler")
            return SKIP
        return check(argv[1], argv[2], argv[3], cc)
    if len(argv) in (1, 2) and not argv[0].startswith("-"):
        if not cc:
            print("no C compiler ($CC or cc)", file=sys.stderr)
            return 2
        if len(argv) == 1:
            sys.stdout.write(layout_text(argv[0], cc))
            return 0
        m = re.match(r"(libfatune\.so\.\d+)\.layout$", os.path.basename(argv[1]))
        text = layout_text(argv[0], cc, m.group(1) if m else "libfatune.so.N")
        os.makedirs(os.path.dirname(os.path.abspath(argv[1])), exist_ok=True)
        with open(argv[1], "w") as f:
            f.write(text)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
