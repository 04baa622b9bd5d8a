#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The licence is stated where a reader or a tool looks for it: LICENSE holds
# the MIT text, and every host source (C and headers, Python, shell, CMake,
# the .in templates of the install files) names it in an SPDX line at its
# top (line 1, or line 2 after a shebang). templates/ and generator/ are
# exempt (their text is inside every variant's hash), as are the test data
# and fuzz corpora. Files are listed by git where the source is a checkout,
# (tracked and untracked, not ignored), else found on disk.
# Usage: test_license.sh FATUNE_BIN (unused; the source is this script's ..).
set -u -o pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
fail=0
grep -q '^MIT License$' "$SRC/LICENSE" 2>/dev/null || { echo "FAIL: $SRC/LICENSE is missing or not MIT"; fail=1; }
grep -q 'Permission is hereby granted, free of charge' "$SRC/LICENSE" 2>/dev/null \
  || { echo "FAIL: LICENSE lacks the MIT permission notice"; fail=1; }
cd "$SRC" || exit 1
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  list() { git ls-files --cached --others --exclude-standard; }
else
  list() { find . -type f -not -path './build*' -not -path './.git/*' | sed 's|^\./||'; }
fi
n=0
while read -r f; do
  case "$f" in
    templates/*|generator/*|tests/data/*|fuzz/corpus/*|db/*|notes/*|results/*|build*/*) continue ;;
  esac
  case "$f" in
    *.c|*.h|*.py|*.sh|*.cmake|CMakeLists.txt|*/CMakeLists.txt|*.in|.ci/run) ;;
    *) continue ;;
  esac
  n=$((n + 1))
  if ! head -2 "$f" | grep -q 'SPDX-License-Identifier: MIT'; then
    echo "FAIL: $f has no 'SPDX-License-Identifier: MIT' in its first two lines"
    fail=1
  fi
done < <(list)
[ "$n" -gt 50 ] || { echo "FAIL: only $n host sources found under $SRC"; fail=1; }
[ "$fail" -eq 0 ] && echo "licence: LICENSE and $n host sources ok"
exit "$fail"
