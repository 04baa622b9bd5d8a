#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A build that cannot be stored stops the tuner: every commit of a build
# failing (a full disk: "database or disk is full") once read as "compiled
# 70 variants ... 0 failed" with exit 3, and every rerun compiled it all
# again. Here a trigger makes the builds table refuse each insert, as a
# full disk does; the tuner must exit 1 naming the build, the database and
# SQLite's reason, and print no summary. $1 is the fatune binary.
set -u
F=$1
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
db=$tmp/full.db
"$F" retire-stale --db "$db" 2>/dev/null || { echo "FAIL: could not make $db"; exit 1; }
python3 - "$db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("CREATE TRIGGER full BEFORE INSERT ON builds BEGIN"
          " SELECT RAISE(ABORT, 'database or disk is full'); END")
c.commit()
PY
err=$(FATUNE_LIBCUDA=/nonexistent "$F" --db "$db" --head-dim 64 --dtype fp16 --mask none \
        --arch sm_80 --jobs 2 2>&1 >/dev/null); rc=$?
pass=0 fail=0
if [ "$rc" -eq 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: status $rc, want 1"; fi
if grep -qE "^fatune: storing the build of fwd\.[^ ]+ in $db: cannot store build [0-9a-f]{64} \(variant [0-9]+, sm_80\): database or disk is full$" <<<"$err"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); printf 'FAIL: no message naming the build and the reason:\n%s\n' "$err"
fi
if grep -q "^fatune: compiled " <<<"$err"; then
  fail=$((fail + 1)); printf 'FAIL: a summary of builds that were not stored:\n%s\n' "$err"
else
  pass=$((pass + 1))
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
