#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One device call over a pack (scripts/gpu_pack.sh), smaller than
# scripts/gpu_run.sh's everything-at-once: the GPU tests named, up to four
# tuning runs into one database, then a script of the caller's. Run from the
# repository root on the device, carrying the pack:
#   TESTS="bwd:ws90 runtime" TEST_PARAM=NAME=VALUE TEST_S=300 \
#   TUNE1="--direction bwd --family ws90 ..." TUNE_S=400 DB_IN=pack/db.gz \
#   AFTER=pack/after.sh PACK=build-gpu bash scripts/gpu_call.sh
# TESTS: test_gpu_NAME binaries, NAME:FAMILY setting FATUNE_TEST_FAMILY;
# TEST_PARAM sets FATUNE_TEST_PARAM (test_gpu_bwd: only the Hopper variants
# with every NAME=VALUE of it, space-separated); TEST_S and TUNE_S bound
# each test and each tune (a tune is stopped with SIGINT, so the database
# keeps what it finished). Everything
# lands in $OUT (the device tool's folder), packed by scripts/fit_out.sh
# into what comes back: the log, the database in 15 MiB gzip parts.
set -u -o pipefail
B=${PACK:-build-gpu}
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/call.log") 2>&1
# shellcheck source=gpu_unpack.sh
. "$ROOT/scripts/gpu_unpack.sh"
gpu_unpack "$B" || { echo "gpu_call.sh: cannot unpack $B/pack.tar.xz"; exit 2; }
[ -x "$B/fatune" ] || { echo "gpu_call.sh: no $B/fatune: pack a build first (scripts/gpu_pack.sh)"; exit 2; }
# The pack leaves out the soname link and the tables database (the device
# tool carries no links, and the tree holds the tables as SQL).
if [ -f "$B/runtime/libfatune.so" ]; then
  soname=$(grep -ao 'libfatune\.so\.[0-9]*' "$B/runtime/libfatune.so" | head -1)
  [ -z "$soname" ] || [ -e "$B/runtime/$soname" ] || ln -s libfatune.so "$B/runtime/$soname"
fi
[ -f "$B/runtime/fatune_tables.db" ] || { mkdir -p "$B/runtime" &&
  "$B/build_tables" "$B/runtime/fatune_tables.db" db/tables/*.sql >/dev/null; }
DB=$OUT/run.db
if [ -n "${DB_IN:-}" ]; then gunzip -c "$DB_IN" > "$DB" || exit 2; fi
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
for spec in ${TESTS:-}; do
  name=${spec%%:*}; fam=""; [ "$spec" != "$name" ] && fam=${spec#*:}
  echo "== test_gpu_$name ${fam:+family $fam} ($(date -u +%T))"
  t0=$(date +%s)
  (cd "$B" && FATUNE_SOURCE_DIR="$ROOT" FATUNE_TEST_FAMILY="$fam" FATUNE_TEST_PARAM="${TEST_PARAM:-}" \
    timeout "${TEST_S:-300}" stdbuf -oL "$ROOT/$B/tests/test_gpu_$name") > "$OUT/t_$name$fam.log" 2>&1
  rc=$?
  echo "rc $rc in $(( $(date +%s) - t0 )) s"
  grep -E "FAIL|passed|failed" "$OUT/t_$name$fam.log" | tail -5
done
for i in 1 2 3 4; do
  v=TUNE$i
  [ -n "${!v:-}" ] || continue
  echo "== fatune ${!v} ($(date -u +%T))"
  t0=$(date +%s)
  # shellcheck disable=SC2086  # the flags are words on purpose
  timeout -s INT "${TUNE_S:-400}" "$B/fatune" --gpu 0 --db "$DB" ${!v} > "$OUT/tune$i.log" 2>&1
  echo "rc $? in $(( $(date +%s) - t0 )) s"
  tail -25 "$OUT/tune$i.log"
done
if [ -n "${AFTER:-}" ]; then
  echo "== after ($(date -u +%T))"
  PACK="$B" OUT="$OUT" DB="$DB" bash "$AFTER"
fi
bash scripts/fit_out.sh "$OUT" | tail -12
echo "== done ($(date -u +%T))"
