#!/usr/bin/env bash
# Everything fatune does on a GPU, in one call, for the lent GPU machine:
# the binary runs, the gpu-labelled tests, a tuning run, and the benchmark
# against PyTorch's SDPA backends on the same shapes in the same run.
#
# Build here first (the GPU machine has no Lua or SQLite headers):
#   cmake -S . -B build && cmake --build build -j
# then run there, from the repository root, with build/ carried:
#   scripts/gpu_run.sh [HEAD_DIMS] [SEQLENS]      (defaults: 128 and the six buckets)
# Output goes to $OUT (the device tool's folder) or ./gpu-out: the full log,
# the database (gzip, split into 15 MiB parts: cat fatune.db.gz.part* | gunzip),
# the benchmark rows (JSON).
set -u -o pipefail
HEAD_DIMS=${1:-128}
SEQLENS=${2:-512,1024,2048,4096,8192,16384}
B=${FATUNE_BUILD:-build}
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_run.log") 2>&1
DB="$OUT/fatune.db"
failures=0
section() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

section "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv || failures=$((failures + 1))
"$B/fatune" --version || { echo "the fatune binary does not run here"; exit 1; }

section "gpu tests"
passed=0 failed=0
for t in "$B"/tests/test_gpu_*; do
  [ -x "$t" ] || continue
  if (cd "$B" && FATUNE_SOURCE_DIR="$OLDPWD" timeout 600 "$OLDPWD/$t"); then
    passed=$((passed + 1))
  else
    echo "FAILED: $t"
    failed=$((failed + 1))
  fi
done
# Fault isolation: the tuner with deliberately faulting, trapping and hanging
# variants tuned beside the real ones.
if (cd "$B" && FATUNE_SOURCE_DIR="$OLDPWD" timeout 900 bash "$OLDPWD/tests/test_gpu_faults.sh" "$OLDPWD/$B/fatune"); then
  passed=$((passed + 1))
else
  echo "FAILED: tests/test_gpu_faults.sh"
  failed=$((failed + 1))
fi
echo "gpu tests: $passed passed, $failed failed"
failures=$((failures + failed))

section "tune: fatune --gpu 0 --head-dim $HEAD_DIMS"
"$B/fatune" --gpu 0 --head-dim "$HEAD_DIMS" --seqlen "$SEQLENS" --db "$DB" \
  || failures=$((failures + 1))

section "benchmark against SDPA (FLASH_ATTENTION, CUDNN_ATTENTION)"
PYTHONUNBUFFERED=1 python3 scripts/bench_sdpa.py --db "$DB" --out "$OUT/bench.json" \
  || failures=$((failures + 1))

# The device tool brings back files of at most 16 MiB: compress and split.
gzip -f "$DB" && rm -f "$DB-wal" "$DB-shm" && split -b 15m -d "$DB.gz" "$DB.gz.part" && rm -f "$DB.gz"
section "done: $failures failures"
exit $((failures > 0))
