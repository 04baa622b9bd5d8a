# s44 call 2 (issue 20, H100): the ws90 backward at d256 won every bf16 cell of
# call 1 (0.80-0.85x wgmma90's time). Now the rest of the d256 backward space
# for the H100's table, into call 1's database (build-gpu14/run.db, carried):
# 1. test_gpu_bwd ws90 d256 with STATS_AHEAD=1 (call 1 ran STATS_AHEAD=0).
# 2. tune bwd d256, both dtypes, the default seqlens (s512-16384), none/causal.
# 3. bench_runtime bwd d256 bf16 and fp16 with that database.
set -u
B=build-gpu14/build-gpu
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/call.log") 2>&1
. scripts/gpu_unpack.sh; gpu_unpack "$B" || exit 2
soname=$(grep -ao 'libfatune\.so\.[0-9]*' "$B/runtime/libfatune.so" | head -1)
[ -e "$B/runtime/$soname" ] || ln -s libfatune.so "$B/runtime/$soname"
[ -f "$B/runtime/fatune_tables.db" ] || "$B/build_tables" "$B/runtime/fatune_tables.db" db/tables/*.sql > "$OUT/build_tables.log" 2>&1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
cp build-gpu14/run.db "$OUT/run.db"
echo "== test_gpu_bwd ws90 d256 STATS_AHEAD=1 ($(date -u +%T))"
(cd "$B" && FATUNE_SOURCE_DIR="$ROOT" FATUNE_TEST_FAMILY=ws90 FATUNE_TEST_HEAD_DIM=256 FATUNE_TEST_PARAM="STATS_AHEAD=1" \
  timeout 80 stdbuf -oL "$ROOT/$B/tests/test_gpu_bwd") > "$OUT/t_bwd.log" 2>&1
echo "rc $?"; grep -E "FAIL|passed|failed|error" "$OUT/t_bwd.log" | tail -12
echo "== tune bwd d256 ($(date -u +%T))"
timeout -s INT 150 "$B/fatune" --gpu 0 --db "$OUT/run.db" --direction bwd --head-dim 256 > "$OUT/tune.log" 2>&1
echo "rc $?"; tail -26 "$OUT/tune.log"
echo "== bench_runtime bwd d256 bf16,fp16 ($(date -u +%T))"
PYTHONPATH=$ROOT/python FATUNE_LIB=$ROOT/$B/runtime/libfatune.so FATUNE_DB=$OUT/run.db timeout 90 \
  python3 bench/bench_runtime.py --direction bwd --head-dims 256 --bwd-dtypes bf16,fp16 --memory-seqlen 0 \
  --no-deterministic --out "$OUT/bench_bwd.json" > "$OUT/bench_bwd.log" 2>&1
echo "rc $?"; tail -24 "$OUT/bench_bwd.log"
gzip -f "$OUT/run.db"; rm -f "$OUT"/run.db-*
bash scripts/fit_out.sh "$OUT" | tail -3
echo "== done ($(date -u +%T))"
