# s43 call 1 (issue 20): the ws90 backward at head dim 256 (kDSplit 2: two
# consumers share 64 keys, each half of dK's and dV's columns), on the pack
# of this tree (build-gpu14, carry ["build-gpu14"]).
# 1. test_gpu_bwd, ws90 d256 only (STATS_AHEAD 0: the split's code is the
#    same either way), against the fp64 reference.
# 2. The d256 backward tuned cold, every family (mma80, wgmma90, ws90 in
#    one run), bf16, none and causal, s1024-16384 (10 problems).
# 3. bench_runtime's backward d256 bf16 with that database as the user's,
#    against SDPA's cuDNN and FlashAttention-2 backends.
# Expected: ws90 d256 ~0.85x wgmma90's time (ws3 at d128: 0.85-0.88);
# against cuDNN ~0.9-1.0 (the H200's table: 0.63-0.83).
set -u
B=build-gpu14/build-gpu
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/call.log") 2>&1
. scripts/gpu_unpack.sh; gpu_unpack "$B" || exit 2
soname=$(grep -ao 'libfatune\.so\.[0-9]*' "$B/runtime/libfatune.so" | head -1)
[ -e "$B/runtime/$soname" ] || ln -s libfatune.so "$B/runtime/$soname"
[ -f "$B/runtime/fatune_tables.db" ] || "$B/build_tables" "$B/runtime/fatune_tables.db" db/tables/*.sql > "$OUT/build_tables.log" 2>&1
echo "build_tables rc $? ($(grep -c '^stale' "$OUT/build_tables.log" 2>/dev/null) stale)"
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
echo "== test_gpu_bwd ws90 d256 ($(date -u +%T))"
(cd "$B" && FATUNE_SOURCE_DIR="$ROOT" FATUNE_TEST_FAMILY=ws90 FATUNE_TEST_HEAD_DIM=256 FATUNE_TEST_PARAM="STATS_AHEAD=0" \
  timeout 80 stdbuf -oL "$ROOT/$B/tests/test_gpu_bwd") > "$OUT/t_bwd.log" 2>&1
echo "rc $?"; grep -cE " ok|pass" "$OUT/t_bwd.log"; grep -E "FAIL|passed|failed|error" "$OUT/t_bwd.log" | tail -12
echo "== tune bwd d256 bf16 ($(date -u +%T))"
timeout -s INT 90 "$B/fatune" --gpu 0 --db "$OUT/run.db" --direction bwd --head-dim 256 --dtype bf16 \
  --mask none,causal --seqlen 1024,2048,4096,8192,16384 > "$OUT/tune.log" 2>&1
echo "rc $?"; tail -14 "$OUT/tune.log"
echo "== bench_runtime bwd d256 bf16 ($(date -u +%T))"
PYTHONPATH=$ROOT/python FATUNE_LIB=$ROOT/$B/runtime/libfatune.so FATUNE_DB=$OUT/run.db timeout 100 \
  python3 bench/bench_runtime.py --direction bwd --head-dims 256 --bwd-dtypes bf16 --memory-seqlen 0 \
  --no-deterministic --out "$OUT/bench_bwd.json" > "$OUT/bench_bwd.log" 2>&1
echo "rc $?"; tail -30 "$OUT/bench_bwd.log"
gzip -f "$OUT/run.db"; rm -f "$OUT"/run.db-*
bash scripts/fit_out.sh "$OUT" | tail -3
echo "== done ($(date -u +%T))"
