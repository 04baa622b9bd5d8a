# s37 call "native1" (any GPU, ~7 min): s35's next1 (the binding's GPU
# tests over 5a7ddd2/7ee6c0a/47248df, hostparts2, bench_torch's host table)
# on the s36 pack, then the native host path's first GPU run: its build
# (torch.utils.cpp_extension, into a folder outside $OUT), its GPU test
# against the Python path, and bench_torch's host table with it.
#   carry ["build-gpu9"]; the caller runs scripts/fit_out.sh (call1.sh)
set -u
PACK=build-gpu9/build-gpu
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/call.log") 2>&1
. scripts/gpu_unpack.sh; gpu_unpack "$PACK" || exit 2
soname=$(grep -ao 'libfatune\.so\.[0-9]*' "$PACK/runtime/libfatune.so" | head -1)
[ -e "$PACK/runtime/$soname" ] || ln -s libfatune.so "$PACK/runtime/$soname"
[ -f "$PACK/runtime/fatune_tables.db" ] || "$PACK/build_tables" "$PACK/runtime/fatune_tables.db" db/tables/*.sql >/dev/null
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so PYTHONUNBUFFERED=1
export FATUNE_NATIVE_DIR=/tmp/fatune-native
echo "== pytest, Python path ($(date -u +%T))"
FATUNE_NATIVE=0 timeout 150 python3 -m pytest -q python/tests/test_gpu_kvcache.py python/tests/test_gpu_torch.py \
  python/tests/test_ops.py python/tests/test_api.py python/tests/test_fatune.py > "$OUT/pytest.log" 2>&1
echo "rc $?"; tail -8 "$OUT/pytest.log"
echo "== hostparts2 ($(date -u +%T))"
FATUNE_NATIVE=0 timeout 60 python3 results/raw/s35/scripts/hostparts2.py > "$OUT/hostparts2.log" 2>&1; tail -30 "$OUT/hostparts2.log"
echo "== native build ($(date -u +%T))"
t0=$(date +%s)
timeout 180 python3 -m fatune.native build > "$OUT/native_build.log" 2>&1; echo "rc $? in $(( $(date +%s) - t0 )) s"
tail -5 "$OUT/native_build.log"
python3 -m fatune.native
echo "== test_gpu_native ($(date -u +%T))"
timeout 120 python3 -m pytest -v python/tests/test_gpu_native.py > "$OUT/native_test.log" 2>&1
echo "rc $?"; grep -E "PASS|FAIL|Error|passed|failed" "$OUT/native_test.log" | tail -20
echo "== pytest test_gpu_torch with the native path ($(date -u +%T))"
timeout 100 python3 -m pytest -q python/tests/test_gpu_torch.py python/tests/test_fatune.py > "$OUT/pytest_native.log" 2>&1
echo "rc $?"; tail -6 "$OUT/pytest_native.log"
for mode in 0 1; do
  echo "== bench_torch host, FATUNE_NATIVE=$mode ($(date -u +%T))"
  FATUNE_NATIVE=$mode timeout 60 python3 bench/bench_torch.py --tables host --json "$OUT/bench_torch_n$mode.json" \
    > "$OUT/bench_torch_n$mode.log" 2>&1
  echo "rc $?"; tail -24 "$OUT/bench_torch_n$mode.log"
done
echo "== done ($(date -u +%T))"
