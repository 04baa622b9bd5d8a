#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Packs what scripts/gpu_run.sh needs from a build into a small folder to
# carry to the GPU machine (the device tool carries at most 64 MiB, the
# working tree included; a whole build folder with its object files comes
# close):
#   scripts/gpu_pack.sh [BUILD] [OUT_DIR] [DB]   (defaults: build build-gpu)
# DB, when given, is a tuning database (or its fatune.db.gz.part* folder)
# copied in as OUT_DIR/db-in/ for DB_IN=OUT_DIR/db-in. Then run there with
# FATUNE_BUILD=OUT_DIR scripts/gpu_run.sh ..., or scripts/gpu_call.sh
# (PACK=OUT_DIR), carrying OUT_DIR.
# PACK_TESTS="bwd runtime" packs only those test_gpu_* binaries ("" none;
# unset, every one): the tracked tree (the H200 table alone is ~42 MB)
# and the pack share the 64 MiB.
set -eu
B=${1:-build}
O=${2:-build-gpu}
rm -rf "$O"
mkdir -p "$O/tests" "$O/runtime"
cp "$B/fatune" "$B/sanitize_winners" "$B/build_tables" "$O/"
if [ -n "${PACK_TESTS+set}" ]; then
  for t in $PACK_TESTS; do cp "$B/tests/test_gpu_$t" "$O/tests/"; done
else
  cp "$B"/tests/test_gpu_* "$O/tests/"
fi
# Dereferenced: the soname links become files (the device tool does not carry links).
cp -L "$B/runtime/libfatune.so" "$B/runtime/attention_example" "$O/runtime/"
# The C benchmarks (bench/*.c), small; they find runtime/ as the tests do.
mkdir -p "$O/bench"
cp "$B/bench/bench_decode_steps" "$O/bench/"
# The tree the device tool carries holds the shipped tables as SQL (45 MB),
# so the pack leaves out what the device can make: the soname link
# libfatune.so.N and the tables database (scripts/gpu_run.sh makes both),
# and the binaries' symbols.
strip "$O/fatune" "$O/sanitize_winners" "$O/build_tables" "$O"/runtime/* "$O"/bench/*
find "$O/tests" -type f -exec strip {} +
if [ $# -ge 3 ]; then
  mkdir -p "$O/db-in"
  if [ -d "$3" ]; then cp "$3"/*.gz.part* "$O/db-in/"
  else gzip -c "$3" | split -b 15m -d - "$O/db-in/fatune.db.gz.part"; fi
fi
# Carried as one xz tarball, OUT_DIR/pack.tar.xz (a 19 MiB pack is ~1.3 MiB
# so: libfatune's text is mostly template source), which scripts/gpu_run.sh
# and scripts/gpu_call.sh unpack in place (scripts/gpu_unpack.sh) before
# anything runs. PACK_PLAIN=1 leaves the folder as it is.
if [ -z "${PACK_PLAIN:-}" ]; then
  tar -C "$O" -cf - . | xz -6 -T0 > "$O.pack.tar.xz"
  rm -rf "$O"
  mkdir -p "$O"
  mv "$O.pack.tar.xz" "$O/pack.tar.xz"
fi
# What the device tool will carry: the tracked tree and this pack.
tree=$(git ls-files -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
pack=$(du -sb "$O" | cut -f1)
total=$(( (tree + pack) / 1048576 ))
echo "gpu_pack.sh: $O $(( pack / 1048576 )) MiB + the tracked tree $(( tree / 1048576 )) MiB = $total MiB of the 64 MiB carry"
[ "$total" -lt 64 ] || echo "gpu_pack.sh: over the carry limit: set PACK_TESTS, or leave out runtime/ when no call needs it" >&2
