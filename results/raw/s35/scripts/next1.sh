# Prepared in the 35th session for the next one's first call (any GPU):
# the binding's GPU tests over what landed after call 1b without a GPU (the
# options memo, the eager path of the KV-cache and fp8 operators, the KV-cache
# memo), then the host time by prefixes (hostparts2.py) and bench_torch's
# host table (now with the KV-cache row). ~3 minutes.
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
echo "== pytest ($(date -u +%T))"
timeout 240 python3 -m pytest -q python/tests/test_gpu_kvcache.py python/tests/test_gpu_torch.py \
  python/tests/test_ops.py python/tests/test_api.py python/tests/test_fatune.py > "$OUT/pytest.log" 2>&1
echo "rc $?"; tail -15 "$OUT/pytest.log"
echo "== hostparts2 ($(date -u +%T))"
timeout 90 python3 results/raw/s35/scripts/hostparts2.py > "$OUT/hostparts2.log" 2>&1; cat "$OUT/hostparts2.log"
echo "== bench_torch host ($(date -u +%T))"
timeout 90 python3 bench/bench_torch.py --tables host --json "$OUT/bench_torch.json" > "$OUT/bench_torch.log" 2>&1
echo "rc $?"; tail -24 "$OUT/bench_torch.log"
echo "== done ($(date -u +%T))"
