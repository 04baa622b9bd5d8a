#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Packs what scripts/gpu_run.sh needs from a build into a small folder to
# carry to the GPU machine (the device tool carries at most 64 MiB, the
# working tree included; a whole build folder with its object files comes
# close):
#   scripts/gpu_pack.sh [BUILD] [OUT_DIR] [DB]   (defaults: build build-gpu)
# DB, when given, is a tuning database (or its fatune.db.gz.part* folder)
# copied in as OUT_DIR/db-in/ for DB_IN=OUT_DIR/db-in. Then run there with
# FATUNE_BUILD=OUT_DIR scripts/gpu_run.sh ..., carrying OUT_DIR.
set -eu
B=${1:-build}
O=${2:-build-gpu}
rm -rf "$O"
mkdir -p "$O/tests" "$O/runtime"
cp "$B/fatune" "$B/sanitize_winners" "$B/build_tables" "$O/"
cp "$B"/tests/test_gpu_* "$O/tests/"
# Dereferenced: the soname links become files (the device tool does not carry links).
cp -L "$B/runtime/libfatune.so" "$B/runtime/attention_example" "$O/runtime/"
# The tree the device tool carries holds the shipped tables as SQL (45 MB),
# so the pack leaves out what the device can make: the soname link
# libfatune.so.N and the tables database (scripts/gpu_run.sh makes both),
# and the binaries' symbols.
strip "$O/fatune" "$O/sanitize_winners" "$O/build_tables" "$O"/tests/* "$O"/runtime/*
if [ $# -ge 3 ]; then
  mkdir -p "$O/db-in"
  if [ -d "$3" ]; then cp "$3"/*.gz.part* "$O/db-in/"
  else gzip -c "$3" | split -b 15m -d - "$O/db-in/fatune.db.gz.part"; fi
fi
du -sh "$O"
