#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Dependence runs one way, and the build says so: cmake/check_layering.cmake
# passes this tree (core/ and runtime/ include nothing of the tuner) and
# fails a tree whose core or runtime includes a tuner header, by name or by
# a relative path, naming each file, line and header.
# Usage: test_layering.sh FATUNE_BIN (unused; the source is this script's ..).
set -u -o pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
CHECK="$SRC/cmake/check_layering.cmake"
fail=0
out=$(cmake -DROOT="$SRC" -DGENERATED="$PWD/generated" -P "$CHECK" 2>&1) \
  || { echo "FAIL: the tree's own layering is refused:"; echo "$out"; fail=1; }

T=$(mktemp -d /tmp/fatune-layering-XXXXXX)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/core" "$T/runtime" "$T/tuner/measure" "$T/templates" "$T/include"
touch "$T/core/types.h" "$T/templates/fat_abi.h" "$T/include/fatune.h" "$T/runtime/runtime_int.h" \
  "$T/tuner/tune.h" "$T/tuner/measure/job.h"
printf '#include <stdio.h>\n#include "types.h"\n#include "fat_abi.h"\n#include "fatune.h"\n' > "$T/core/types.c"
printf '#include "runtime_int.h"\n#include "types.h"\n' > "$T/runtime/args.c"
out=$(cmake -DROOT="$T" -P "$CHECK" 2>&1) \
  || { echo "FAIL: a tree that includes only what it may is refused:"; echo "$out"; fail=1; }

printf '/* db */\n#include "types.h"\n#include "../tuner/measure/job.h"\n' > "$T/core/db.c"
printf '#include "runtime_int.h"\n' > "$T/core/kernel.h"
printf '#include "runtime_int.h"\n  #  include "tune.h"\n' > "$T/runtime/select.c"
want='core/db.c:3: #include "../tuner/measure/job.h": tuner/measure/job.h, not a header of core/, templates/, include/ or the build'"'"'s generated folder
core/kernel.h:1: #include "runtime_int.h": not a header of core/, templates/, include/ or the build'"'"'s generated folder
runtime/select.c:2: #include "tune.h": not a header of runtime/, core/, templates/, include/ or the build'"'"'s generated folder
  dependence runs one way: core/ and runtime/ include nothing of the tuner'
if out=$(cmake -DROOT="$T" -DSTAMP="$T/stamp" -P "$CHECK" 2>&1); then
  echo "FAIL: tuner includes in core/ and runtime/ pass"; fail=1
elif [ "$(printf '%s\n' "$out" | sed '/^$/d; /^CMake Error at /d')" != "$want" ]; then
  echo "FAIL: the refusal reads"; echo "$out"; echo "want"; echo "$want"; fail=1
fi
[ -e "$T/stamp" ] && { echo "FAIL: a refused tree got its stamp"; fail=1; }
[ "$fail" -eq 0 ] && echo "layering: core/ and runtime/ include nothing of the tuner; 3 tuner includes refused"
exit "$fail"
