#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README says what is true:
#  - its C code (every ```c block, in order, as one file) compiles as it
#    stands against include/fatune.h with warnings as errors, and links
#    against the build's libfatune with no symbol left undefined;
#  - every environment variable the code reads is named in it, in
#    backticks: getenv("...") and env_or("...") in the C of core/,
#    runtime/, tuner/ (every folder), tests/, fuzz/, bench/ and examples/,
#    every "FATUNE_..." string literal there (names kept in a macro, as the
#    worker's and the compile server's are), os.environ and os.getenv in
#    python/, bench/ and tests/, and $FATUNE_... and $CUDA_ROOT in the shell
#    scripts (scripts/, tests/, bench/, .ci/run); PATH alone is taken as
#    known;
#  - its sections a newcomer looks for are there, in order, with the
#    Python way in (import fatune);
#  - its two set-up commands are still the two scripts, as written;
#  - the count of winners by which it names the shipped tables' GPU that
#    speaks for them is the build's fatune_tables.db's (needs python3's
#    sqlite3: skipped without it).
# Usage: test_readme.sh FATUNE_BIN (the build folder is its directory).
set -u -o pipefail
BUILD=$(cd "$(dirname "$1")" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
README="$SRC/README.md"
WORK=$(mktemp -d /tmp/fatune-readme-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail=0
CC=${CC:-cc}

awk '/^```c$/ { inside = 1; next } /^```$/ { inside = 0 } inside' "$README" > "$WORK/readme.c"
blocks=$(grep -c '^```c$' "$README")
if [ "$blocks" -lt 1 ] || ! grep -q '^#include <fatune.h>$' "$WORK/readme.c"; then
  echo "FAIL: the README has $blocks C block(s), none including <fatune.h>"
  fail=1
elif ! "$CC" -std=c11 -Wall -Wextra -Werror -fPIC -I"$SRC/include" -c "$WORK/readme.c" \
       -o "$WORK/readme.o" 2> "$WORK/cc.log"; then
  echo "FAIL: the README's C code does not compile as written:"
  cat "$WORK/cc.log"
  fail=1
elif ! "$CC" -shared -o "$WORK/readme.so" "$WORK/readme.o" -L"$BUILD/runtime" -lfatune \
       -Wl,--no-undefined 2> "$WORK/ld.log"; then
  echo "FAIL: the README's C code does not link against $BUILD/runtime/libfatune.so:"
  cat "$WORK/ld.log"
  fail=1
fi

c_dirs=("$SRC/core" "$SRC/runtime" "$SRC/tuner" "$SRC/tests" "$SRC/fuzz" "$SRC/bench" "$SRC/examples")
names=$( (grep -rhoE '(getenv|env_or)\("[A-Z][A-Z0-9_]*"' "${c_dirs[@]}" --include='*.c' --include='*.h' \
            | sed 's/.*("//; s/"$//'
          grep -rhoE '"FATUNE_[A-Z0-9_]+"' "${c_dirs[@]}" --include='*.c' --include='*.h' | tr -d '"'
          grep -rhoE 'os\.(environ(\.get)?[[(]|getenv\()"[A-Z][A-Z0-9_]*"' "$SRC/python" "$SRC/bench" "$SRC/tests" \
               --include='*.py' | sed 's/.*"\(.*\)"/\1/'
          { grep -rhoE '\$\{?(FATUNE_[A-Z0-9_]+|CUDA_ROOT)' "$SRC/scripts" "$SRC/tests" "$SRC/bench" --include='*.sh'
            grep -hoE '\$\{?(FATUNE_[A-Z0-9_]+|CUDA_ROOT)' "$SRC/.ci/run"; } | tr -d '${') | sort -u | grep -vx PATH)
# The tree's own readers, found by the patterns above (a pattern that stops
# matching, say after a rename of env_or, must not pass by finding nothing).
for known in FATUNE_DB FATUNE_NVRTC FATUNE_LIBCUDA FATUNE_COMPILE_TIMEOUT_S FATUNE_WORKER_FD \
             FATUNE_LIB FATUNE_COMPILE_COVER CUDA_ROOT; do
  grep -qx "$known" <<< "$names" || { echo "FAIL: the scan of $SRC did not find \$$known"; fail=1; }
done
for name in $names; do
  grep -q "\`$name\`" "$README" || { echo "FAIL: the README does not document \$$name"; fail=1; }
done

# What a newcomer looks for, in DESIGN's order: what it is (the opening),
# when to choose it, the two commands, the Python way in, every environment
# variable, where the results live.
prev=0
for heading in '## When to choose it' '## Two commands' '## Using the tuned kernels: libfatune' \
               '## Environment variables' '## Results'; do
  at=$(grep -nxF "$heading" "$README" | head -1 | cut -d: -f1)
  if [ -z "$at" ] || [ "$at" -le "$prev" ]; then
    echo "FAIL: the README has no '$heading' section after line $prev"; fail=1
  else
    prev=$at
  fi
done
grep -q '^import fatune ' "$README" || { echo "FAIL: the README shows no 'import fatune'"; fail=1; }
for line in 'scripts/setup.sh      # installs what is missing, builds, runs: fatune --gpu 0 --head-dim 128' \
            'scripts/test.sh       # builds and runs the whole test suite (ctest)'; do
  grep -qxF "$line" "$README" || { echo "FAIL: the README lost its command line '$line'"; fail=1; }
done
tables="$BUILD/runtime/fatune_tables.db"
if [ -f "$tables" ] && python3 -c 'import sqlite3' 2> /dev/null; then
  # "today the H100's, 634 against the H200's 239": each GPU by the word
  # after NVIDIA, most winners first.
  said=$(python3 - "$tables" <<'PY'
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
rows = db.execute("SELECT g.name, count(*) FROM winners w JOIN gpus g ON g.id = w.gpu_id"
                  " GROUP BY g.id ORDER BY count(*) DESC, g.name").fetchall()
short = lambda name: name.split()[1] if name.startswith("NVIDIA ") else name
print(f"today the {short(rows[0][0])}'s, {rows[0][1]}" +
      "".join(f" against the {short(n)}'s {c}" for n, c in rows[1:]))
PY
)
  tr '\n' ' ' < "$README" | tr -s ' ' | grep -qF "($said)" \
    || { echo "FAIL: the README does not say '($said)' of the shipped tables"; fail=1; }
fi
[ "$fail" -eq 0 ] && echo "README: $blocks C block(s) compile and link; $(echo "$names" | wc -w) environment variables documented"
exit "$fail"
