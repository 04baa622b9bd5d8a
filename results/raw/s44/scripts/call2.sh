# s44 call 2 (issue 20): the ws90 backward at head dim 192 (two consumers,
# each a whole slab and half the middle one: products of N 64 and N 32 over
# its 96 columns), on the pack of this tree (build-gpu16, carry
# ["build-gpu16"]), with call 1's database rehashed (build-gpu16/run.db).
# 1. test_gpu_bwd, ws90 d192, STATS_AHEAD 0 and DS_STSM 1, against the fp64 reference:
#    the half slab's MN-major B 64 bytes into 128-byte swizzled rows is
#    the new thing to prove.
# 2. The d192 backward tuned cold, every family, bf16, the default
#    seqlens (s512-16384), none and causal (12 problems): the H100 table
#    has no d192 backward row yet.
# 3. bench_runtime's backward d192 bf16 with that database, against
#    SDPA's cuDNN and FlashAttention-2 backends.
# 4. The same tune in fp16, if the time holds.
# Expected: ws90 d192 0.8-0.85x mma80's time (d256: 0.80-0.85x wgmma90's).
set -u
B=build-gpu16/build-gpu
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/call.log") 2>&1
. scripts/gpu_unpack.sh; gpu_unpack "$B" || exit 2
soname=$(grep -ao 'libfatune\.so\.[0-9]*' "$B/runtime/libfatune.so" | head -1)
[ -e "$B/runtime/$soname" ] || ln -s libfatune.so "$B/runtime/$soname"
[ -f "$B/runtime/fatune_tables.db" ] || "$B/build_tables" "$B/runtime/fatune_tables.db" db/tables/*.sql > /tmp/build_tables.log 2>&1
echo "build_tables rc $? ($(grep -c '^stale' /tmp/build_tables.log 2>/dev/null) stale)"
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
cp build-gpu16/run.db "$OUT/run.db"
echo "== test_gpu_bwd ws90 d192 ($(date -u +%T))"
(cd "$B" && FATUNE_SOURCE_DIR="$ROOT" FATUNE_TEST_FAMILY=ws90 FATUNE_TEST_HEAD_DIM=192 FATUNE_TEST_PARAM="STATS_AHEAD=0 DS_STSM=1" \
  timeout 60 stdbuf -oL "$ROOT/$B/tests/test_gpu_bwd") > "$OUT/t_bwd.log" 2>&1
echo "rc $?"; grep -E "FAIL|passed|failed|error" "$OUT/t_bwd.log" | tail -12
echo "== tune bwd d192 bf16 ($(date -u +%T))"
timeout -s INT 100 "$B/fatune" --gpu 0 --db "$OUT/run.db" --direction bwd --head-dim 192 --dtype bf16 > "$OUT/tune.log" 2>&1
echo "rc $?"; tail -14 "$OUT/tune.log"
gzip -c "$OUT/run.db" > "$OUT/run_bf16.db.gz"  # kept should the call be cut after this
echo "== bench_runtime bwd d192,d256 bf16 ($(date -u +%T))"
PYTHONPATH=$ROOT/python FATUNE_LIB=$ROOT/$B/runtime/libfatune.so FATUNE_DB=$OUT/run.db timeout 50 \
  python3 bench/bench_runtime.py --direction bwd --head-dims 192 --bwd-dtypes bf16 --memory-seqlen 0 \
  --no-deterministic --out "$OUT/bench_bwd.json" > "$OUT/bench_bwd.log" 2>&1
echo "rc $?"; tail -24 "$OUT/bench_bwd.log"
echo "== tune bwd d192 fp16 ($(date -u +%T))"
timeout -s INT 80 "$B/fatune" --gpu 0 --db "$OUT/run.db" --direction bwd --head-dim 192 --dtype fp16 > "$OUT/tune16.log" 2>&1
echo "rc $?"; tail -14 "$OUT/tune16.log"
gzip -f "$OUT/run.db" && rm -f "$OUT/run_bf16.db.gz"; rm -f "$OUT"/run.db-*
bash scripts/fit_out.sh "$OUT" | tail -3
echo "== done ($(date -u +%T))"
