#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README says what is true:
#  - its C code (every ```c block, in order, as one file) compiles as it
#    stands against include/fatune.h with warnings as errors, and links
#    against the build's libfatune with no symbol left undefined;
#  - every environment variable the command, the library or the Python
#    package reads (getenv("...") in tuner/ and runtime/, os.environ in
#    python/fatune) is named in it;
#  - its two set-up commands are still the two scripts, as written.
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

names=$( (grep -ho 'getenv("[A-Z_]*")' "$SRC"/tuner/*.c "$SRC"/runtime/*.c | sed 's/getenv("\(.*\)")/\1/'
          grep -ho 'environ\(\.get\)\?[[(]"[A-Z_]*"' "$SRC"/python/fatune/*.py | sed 's/.*"\(.*\)"/\1/') | sort -u)
[ -n "$names" ] || { echo "FAIL: no getenv calls found under $SRC"; fail=1; }
for name in $names; do
  grep -q "\`$name\`" "$README" || { echo "FAIL: the README does not document \$$name"; fail=1; }
done

for line in 'scripts/setup.sh      # installs what is missing, builds, runs: fatune --gpu 0 --head-dim 128' \
            'scripts/test.sh       # builds and runs the whole test suite (ctest)'; do
  grep -qxF "$line" "$README" || { echo "FAIL: the README lost its command line '$line'"; fail=1; }
done
[ "$fail" -eq 0 ] && echo "README: $blocks C block(s) compile and link; $(echo "$names" | wc -w) environment variables documented"
exit "$fail"
