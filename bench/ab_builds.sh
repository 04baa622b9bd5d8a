#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A host-side change A/B'd in one device call: the same backward tuning run
# and the same runtime benchmark from two packed build folders (OLD, NEW),
# alternating, so both meet the same GPU, clocks and temperature. For
# changes outside the templates (launch sequence, runtime): the variants'
# hashes are the same in both, so compare_dbs.py matches every variant.
#
#   bench/ab_builds.sh OLD_BUILD NEW_BUILD HEAD_DIMS SEQLENS [DTYPES]
#
# Writes under $OUT (default ./gpu-out): ab_builds.log, old.db and new.db
# (gzip), bench_{old,new}.json. Each build's shipped tables are made from the
# tree's db/tables/*.sql; the benchmark runs on them alone (an empty user
# database), so both builds serve the same winners.
set -u -o pipefail
OLD=$1 NEW=$2 DIMS=$3 SEQS=$4 DTYPES=${5:-bf16}
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/ab_builds.log") 2>&1
section() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }
for b in "$OLD" "$NEW"; do
  soname=$(grep -ao 'libfatune\.so\.[0-9]*' "$b/runtime/libfatune.so" | head -1)  # its DT_SONAME
  [ -e "$b/runtime/$soname" ] || ln -s libfatune.so "$b/runtime/$soname"
  [ -f "$b/runtime/fatune_tables.db" ] || "$b/build_tables" "$b/runtime/fatune_tables.db" db/tables/*.sql
done
tmp=$(mktemp -d)
for round in 1 2; do  # alternating: old, new, then new, old
  order=("$OLD old" "$NEW new")
  [ "$round" = 2 ] && order=("$NEW new" "$OLD old")
  for entry in "${order[@]}"; do
    b=${entry% *} tag=${entry#* }
    if [ "$round" = 1 ]; then
      section "tune ($tag: $b): bwd d$DIMS s$SEQS $DTYPES"
      timeout -s INT "${TUNE_TIMEOUT:-300}" "$b/fatune" --gpu 0 --direction bwd --head-dim "$DIMS" \
        --seqlen "$SEQS" --dtype "$DTYPES" --db "$tmp/$tag.db"
    fi
    section "runtime benchmark, round $round ($tag: $b)"
    FATUNE_LIB="$PWD/$b/runtime/libfatune.so" FATUNE_DB="$tmp/empty-$tag.db" PYTHONUNBUFFERED=1 \
      python3 bench/bench_runtime.py --direction bwd --head-dims "$DIMS" --bwd-seqlens "$SEQS" \
      --bwd-dtypes "$DTYPES" --memory-seqlen 0 --out "$OUT/bench_${tag}_$round.json"
  done
done
section "tuner: old against new, per variant"
python3 bench/compare_dbs.py "$tmp/old.db" "$tmp/new.db"
for tag in old new; do gzip -c "$tmp/$tag.db" >"$OUT/$tag.db.gz"; done
rm -rf "$tmp"
