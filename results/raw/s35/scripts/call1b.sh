# s35 call 1b, call 1 cut to a shrinking budget: the torch GPU tests on the
# eager path and the memo, bench_torch's graphs and host tables, hostparts,
# and the deterministic backward's column at d128 bf16. Any GPU.
set -u
PACK=build-gpu8/build-gpu
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/call.log") 2>&1
. scripts/gpu_unpack.sh; gpu_unpack "$PACK" || exit 2
soname=$(grep -ao 'libfatune\.so\.[0-9]*' "$PACK/runtime/libfatune.so" | head -1)
[ -e "$PACK/runtime/$soname" ] || ln -s libfatune.so "$PACK/runtime/$soname"
[ -f "$PACK/runtime/fatune_tables.db" ] || "$PACK/build_tables" "$PACK/runtime/fatune_tables.db" db/tables/*.sql >/dev/null
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so
echo "== pytest torch ($(date -u +%T))"
timeout 170 python3 -m pytest -q python/tests/test_gpu_torch.py python/tests/test_gpu_transformers.py > "$OUT/pytest_torch.log" 2>&1
echo "rc $?"; tail -15 "$OUT/pytest_torch.log"
echo "== hostparts ($(date -u +%T))"
timeout 60 python3 results/raw/s35/scripts/hostparts.py > "$OUT/hostparts.log" 2>&1; tail -20 "$OUT/hostparts.log"
echo "== bench_torch graphs,host ($(date -u +%T))"
timeout 90 python3 bench/bench_torch.py --tables graphs,host --json "$OUT/bench_torch.json" > "$OUT/bench_torch.log" 2>&1
echo "rc $?"; tail -40 "$OUT/bench_torch.log"
echo "== bench_runtime bwd d128 bf16, deterministic beside ($(date -u +%T))"
timeout 100 python3 bench/bench_runtime.py --direction bwd --head-dims 128 --bwd-dtypes bf16 --memory-seqlen 0 \
  --out "$OUT/bench_bwd_det.json" > "$OUT/bench_bwd_det.log" 2>&1
echo "rc $?"; tail -24 "$OUT/bench_bwd_det.log"
echo "== done ($(date -u +%T))"
