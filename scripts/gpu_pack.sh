#!/usr/bin/env bash
# Packs what scripts/gpu_run.sh needs from a build into a small folder to
# carry to the GPU machine (the device tool carries at most 64 MiB; a whole
# build folder with its object files comes close):
#   scripts/gpu_pack.sh [BUILD] [OUT_DIR] [DB]   (defaults: build build-gpu)
# DB, when given, is a tuning database (or its fatune.db.gz.part* folder)
# copied in as OUT_DIR/db-in/ for DB_IN=OUT_DIR/db-in. Then run there with
# FATUNE_BUILD=OUT_DIR scripts/gpu_run.sh ..., carrying OUT_DIR.
set -eu
B=${1:-build}
O=${2:-build-gpu}
rm -rf "$O"
mkdir -p "$O/tests" "$O/runtime"
cp "$B/fatune" "$B/sanitize_winners" "$O/"
cp "$B"/tests/test_gpu_* "$O/tests/"
# Dereferenced: the soname links become files (the device tool does not carry links).
cp -L "$B/runtime/libfatune.so" "$B/runtime/libfatune.so.0" "$B/runtime/attention_example" "$O/runtime/"
# The shipped tables compress about 3x, and with the repository's own copy
# of them the carry passed 64 MiB: scripts/gpu_run.sh unpacks this.
gzip -c "$B/runtime/fatune_tables.db" >"$O/runtime/fatune_tables.db.gz"
if [ $# -ge 3 ]; then
  mkdir -p "$O/db-in"
  if [ -d "$3" ]; then cp "$3"/*.gz.part* "$O/db-in/"
  else gzip -c "$3" | split -b 15m -d - "$O/db-in/fatune.db.gz.part"; fi
fi
du -sh "$O"
