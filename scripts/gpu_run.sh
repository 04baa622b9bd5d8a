#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Everything fatune does on a GPU, in one call, for the lent GPU machine:
# the binary runs, the gpu-labelled tests (fault isolation included), a
# tuning run, and the benchmark against PyTorch's SDPA backends on the same
# shapes in the same run.
#
# Build here first (the GPU machine has no Lua or SQLite headers):
#   cmake -S . -B build && cmake --build build -j
# then run there, from the repository root, with build/ carried:
#   scripts/gpu_run.sh [HEAD_DIMS] [SEQLENS]      (defaults: 128 and the six buckets)
# Steps can be switched off: TESTS=0 TUNE=0 BENCH=0 RUNTIME=0, or on: DECODE=1
# (tune the decoding problem), WINDOWS=1 (tune sliding windows), VARLEN=1 (tune a
# variable-length profile), PROFILE=1 (ncu of the
# backward against FA2, PROFILE_HEAD_DIMS="64 128", PROFILE_SEQLEN, PROFILE_CAUSAL=1), HOST=1 (bench/bwd_overhead.py:
# where a backward call's time goes, HOST_HEAD_DIMS, HOST_SEQLENS), FEATURES=1 (bench/bench_features.py); GPU_TESTS=a,b runs
# only test_gpu_a and test_gpu_b (faults: the fault-isolation script); HEAD_DIMS "" tunes
# no forward, BWD_HEAD_DIMS=64,128 (and BWD_SEQLENS, BWD_DTYPES) tunes the backward too,
# TUNE_TIMEOUT=S stops each tuning after S seconds; SANITIZE=1
# adds compute-sanitizer over the stored winners (of SANITIZE_DB, default the
# run's database; $B/runtime/fatune_tables.db: the shipped ones; SANITIZE_PREFIX=bwd.ws90
# only the winners whose names begin so). DB_IN=path/to/fatune.db.gz
# (or a folder of its .part files) starts from an earlier run's database, so
# the tuner resumes instead of measuring again. BENCH_HEAD_DIMS limits the
# SDPA comparison to some head dims.
# Output goes to $OUT (the device tool's folder) or ./gpu-out: the full log,
# the database (gzip, split into 15 MiB parts: cat fatune.db.gz.part* | gunzip),
# the benchmark rows (JSON); past 8 files the rest in rest.tgz (fit_out.sh).
set -u -o pipefail
HEAD_DIMS=${1-128}  # "" tunes no forward
SEQLENS=${2:-512,1024,2048,4096,8192,16384}
B=${FATUNE_BUILD:-build}
ROOT=$PWD  # the repository root: run from there
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_run.log") 2>&1
DB="$OUT/fatune.db"
failures=0
section() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

# A pack carried as one tarball (scripts/gpu_pack.sh) is unpacked first.
# shellcheck source=gpu_unpack.sh
. "$ROOT/scripts/gpu_unpack.sh"
gpu_unpack "$B" || { echo "cannot unpack $B/pack.tar.xz"; exit 1; }
# scripts/gpu_pack.sh leaves out the soname link and the shipped tables'
# database: made here, from the tree's db/tables/*.sql as the build does.
soname=$(grep -ao 'libfatune\.so\.[0-9]*' "$B/runtime/libfatune.so" | head -1)  # its DT_SONAME
[ -e "$B/runtime/$soname" ] || ln -s libfatune.so "$B/runtime/$soname"
if [ ! -f "$B/runtime/fatune_tables.db" ]; then
  "$B/build_tables" "$B/runtime/fatune_tables.db" db/tables/*.sql
fi

section "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv || failures=$((failures + 1))
"$B/fatune" --version || { echo "the fatune binary does not run here"; exit 1; }

if [ -n "${DB_IN:-}" ]; then
  if [ -d "$DB_IN" ]; then cat "$DB_IN"/*.part* | gunzip >"$DB"; else gunzip -c "$DB_IN" >"$DB"; fi
  echo "starting from $DB_IN ($(stat -c %s "$DB") bytes)"
fi

run_test() {  # run_test NAME COMMAND...: one gpu test, from the build folder
  local name=$1 rc=0; shift
  (cd "$B" && FATUNE_SOURCE_DIR="$ROOT" timeout 900 "$@") || rc=$?
  case $rc in
    0) passed=$((passed + 1)) ;;
    77) echo "SKIPPED: $name"; skipped=$((skipped + 1)) ;;  # no driver: counts as a failure below
    *) echo "FAILED: $name (exit $rc)"; failed=$((failed + 1)) ;;
  esac
}

if [ "${TESTS:-1}" = 1 ]; then
  section "gpu tests"
  passed=0 failed=0 skipped=0
  # GPU_TESTS=runtime,materialize runs only those (names without test_gpu_).
  wanted() { [ -z "${GPU_TESTS:-}" ] || [[ ",$GPU_TESTS," == *",$1,"* ]]; }
  for t in "$B"/tests/test_gpu_*; do
    [ -x "$t" ] || continue
    name=${t##*/test_gpu_}
    wanted "$name" || continue
    run_test "$t" "$ROOT/$t"
  done
  # Fault isolation: the tuner with deliberately faulting, trapping and
  # hanging variants tuned beside the real ones.
  wanted faults && run_test tests/test_gpu_faults.sh bash "$ROOT/tests/test_gpu_faults.sh" "$ROOT/$B/fatune"
  echo "gpu tests: $passed passed, $failed failed, $skipped skipped"
  # On the GPU machine nothing may skip: a skip there means the driver failed.
  failures=$((failures + failed + skipped))
fi

if [ "${TUNE:-1}" = 1 ]; then
  tune() {  # tune DIRECTION HEAD_DIMS SEQLENS [MORE OPTIONS]
    section "tune: fatune --gpu 0 --direction $1 --head-dim $2 ${3:+--seqlen $3 }${4:-}"
    # TUNE_TIMEOUT (seconds) interrupts the tuner as Ctrl-C would: it stops
    # after the current variant, keeps what it measured, and a later call
    # (DB_IN) resumes.
    local rc=0
    timeout -s INT "${TUNE_TIMEOUT:-0}" "$B/fatune" --gpu 0 --direction "$1" --head-dim "$2" \
      ${3:+--seqlen "$3"} --db "$DB" ${4:-} || rc=$?
    case $rc in
      0) ;;
      124|130) echo "tuning stopped by TUNE_TIMEOUT=${TUNE_TIMEOUT:-0}: resume with DB_IN" ;;
      *) failures=$((failures + 1)) ;;
    esac
  }
  [ -n "$HEAD_DIMS" ] && tune fwd "$HEAD_DIMS" "$SEQLENS"
  [ -n "${BWD_HEAD_DIMS:-}" ] && tune bwd "$BWD_HEAD_DIMS" "${BWD_SEQLENS:-1024,2048,4096,8192,16384}" \
    "${BWD_DTYPES:+--dtype $BWD_DTYPES}"
  # DECODE=1: issue 4's decoding problem (batch 8, 32 query heads over 8
  # K/V heads, 65536 keys), where the splitkv family competes.
  [ "${DECODE:-0}" = 1 ] && tune fwd 128 1,16 "--dtype bf16 --seqlen-k 65536 --gqa 4 --batch 8"
  # WINDOWS=1: sliding windows (left 256, 1024, 4096; right 0) over 4096 and
  # 16384 queries, the mask issue's windowed problem among them.
  [ "${WINDOWS:-0}" = 1 ] && tune fwd 128 4096,16384 "--dtype bf16 --mask local --window 256,0:1024,0:4096,0"
  # VARLEN=1: the variable-length batch of bench_features.py's row f (eight
  # sequences, 538 to 3976 tokens) as a profile of its own.
  [ "${VARLEN:-0}" = 1 ] && tune fwd 128 "" "--dtype bf16 --mask causal --varlen 3976,2092,538,3777,3879,2599,2919,812"
  # Each problem's fastest variant of each family side by side (one run:
  # the same GPU, clocks and inputs for all).
  [ -f "$DB" ] && { python3 bench/family_best.py "$DB" >"$OUT/family_best.txt" && tail -4 "$OUT/family_best.txt"; }
fi

if [ "${FEATURES:-0}" = 1 ]; then
  section "problem features against SDPA (issue 4's table)"
  FATUNE_LIB="$ROOT/$B/runtime/libfatune.so" FATUNE_DB="$DB" PYTHONUNBUFFERED=1 \
    python3 bench/bench_features.py --out "$OUT" ${FEATURES_QUICK:+--quick} || failures=$((failures + 1))
fi

if [ "${BENCH:-1}" = 1 ]; then
  section "benchmark against SDPA (FLASH_ATTENTION, CUDNN_ATTENTION)"
  PYTHONUNBUFFERED=1 python3 bench/bench_sdpa.py --db "$DB" --out "$OUT/bench.json" \
    ${BENCH_HEAD_DIMS:+--head-dims "$BENCH_HEAD_DIMS"} || failures=$((failures + 1))
fi

if [ "${RUNTIME:-1}" = 1 ]; then
  section "runtime: C example, Python binding against fp64 SDPA, benchmark against SDPA"
  # The run's own database is the user database: what was just tuned serves.
  export PYTHONUNBUFFERED=1 FATUNE_LIB="$ROOT/$B/runtime/libfatune.so" FATUNE_DB="$DB"
  "$B/runtime/attention_example" 1000 128 1 || failures=$((failures + 1))
  python3 python/tests/test_fatune.py "$B/runtime/fatune_tables.db" || failures=$((failures + 1))
  python3 bench/bench_runtime.py --head-dims "${BENCH_HEAD_DIMS:-64,128,256}" \
    --out "$OUT/bench_runtime.json" || failures=$((failures + 1))
fi

if [ "${HOST:-0}" = 1 ]; then
  section "backward: host time, queued time and per-kernel times against FA2"
  FATUNE_LIB="$ROOT/$B/runtime/libfatune.so" FATUNE_DB="$DB" PYTHONUNBUFFERED=1 \
    python3 bench/bwd_overhead.py ${HOST_HEAD_DIMS:+--head-dims "$HOST_HEAD_DIMS"} \
    ${HOST_SEQLENS:+--seqlens "$HOST_SEQLENS"} || failures=$((failures + 1))
fi

if [ "${SANITIZE:-0}" = 1 ] && [ -x "$B/sanitize_winners" ]; then
  section "compute-sanitizer over the stored winners"
  for tool in memcheck racecheck synccheck; do
    # racecheck skips the fp64 reference kernels (the yardstick, not a
    # shipped kernel): instrumented, their shared-memory traffic alone took
    # minutes. memcheck and synccheck check them too.
    filter=()
    [ "$tool" = racecheck ] && filter=(--kernel-name-exclude kns=fat_reference)
    timeout "${SANITIZE_TIMEOUT:-300}" \
      compute-sanitizer --tool "$tool" "${filter[@]}" --error-exitcode 1 "$B/sanitize_winners" \
      "${SANITIZE_DB:-$DB}" 0 "${SANITIZE_PREFIX:-}" \
      >"$OUT/sanitizer-$tool.log" 2>&1 && echo "$tool: clean" \
      || { echo "$tool: FAILED"; tail -20 "$OUT/sanitizer-$tool.log"; failures=$((failures + 1)); }
  done
fi

if [ "${PROFILE:-0}" = 1 ]; then
  # One backward of fatune (the run's database serves) and one of SDPA's
  # FLASH_ATTENTION backend under Nsight Compute, and their stall reasons
  # side by side (notes/kernel-log.md reads them). The clocks are left alone.
  # PROFILE_SEQLEN (default 4096) and PROFILE_CAUSAL=1 pick the problem; a
  # separate-dQ winner's second kernel (fat_bwd_dq) is profiled too.
  ps=${PROFILE_SEQLEN:-4096}
  pc=(); [ "${PROFILE_CAUSAL:-0}" = 1 ] && pc=(--causal)
  for d in ${PROFILE_HEAD_DIMS:-128}; do
    section "ncu: backward d$d s$ps ${pc[*]}, fatune against FlashAttention-2"
    FATUNE_LIB="$ROOT/$B/runtime/libfatune.so" FATUNE_DB="$DB" timeout 300 \
      ncu --clock-control none --kernel-name regex:'fat_bwd_mma80|fat_bwd_wgmma90|fat_bwd_ws90|fat_bwd_dq$|flash_bwd_dq_dk_dv' \
      --launch-count 3 \
      --section SpeedOfLight --section WarpStateStats --section InstructionStats --section SourceCounters \
      -o "$OUT/profile_bwd_d$d" python3 bench/profile_bwd.py --head-dim "$d" --seqlen "$ps" "${pc[@]}" \
      && ncu -i "$OUT/profile_bwd_d$d.ncu-rep" --page raw --csv >"$OUT/profile_bwd_d$d.csv" \
      && python3 bench/ncu_stalls.py "$OUT/profile_bwd_d$d.csv" || failures=$((failures + 1))
    # Per-instruction SASS with executed counts, stall samples and shared-memory
    # wavefronts, one file per kernel (bench/ncu_sass.py sums them by opcode).
    for k in fat_bwd_mma80 fat_bwd_wgmma90 fat_bwd_ws90 fat_bwd_dq flash_bwd_dq_dk_dv; do
      # An atomic winner has no fat_bwd_dq: the raw page lists what was profiled.
      grep -q "$k" "$OUT/profile_bwd_d$d.csv" 2>/dev/null || continue
      ncu -i "$OUT/profile_bwd_d$d.ncu-rep" --kernel-name regex:"$k" --page source --csv --print-source sass \
        >"$OUT/source_${k}_d$d.csv" && python3 bench/ncu_sass.py "$OUT/source_${k}_d$d.csv" ||
        failures=$((failures + 1))
    done
  done
  # The device tool brings back about 8 files a call: one archive of them
  # (the log keeps the summaries).
  (cd "$OUT" && tar czf profile_bwd.tgz profile_bwd_d* source_*_d*.csv && rm -f profile_bwd_d* source_*_d*.csv) ||
    failures=$((failures + 1))
fi

# The device tool brings back at most 8 files of 16 MiB: databases gzipped
# and split, extra files archived (scripts/fit_out.sh; a command that writes
# more under $OUT after this script runs it again at its end).
section "packing $OUT"
scripts/fit_out.sh "$OUT" || failures=$((failures + 1))
section "done: $failures failures"
exit $((failures > 0))
