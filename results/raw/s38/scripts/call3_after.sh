# After call 3's tunes: call 2's modes and bench_runtime (call2_after.sh),
# then the native module: its build, test_gpu_native, bench_torch host.
set -u
bash results/raw/s38/scripts/call2_after.sh
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so FATUNE_NATIVE_DIR=/tmp/fatune-native
echo "== native build ($(date -u +%T))"
timeout 90 python3 -m fatune.native build > "$OUT/native_build.log" 2>&1; echo "rc $?"; tail -2 "$OUT/native_build.log"
echo "== test_gpu_native ($(date -u +%T))"
timeout 120 python3 -m pytest -q python/tests/test_gpu_native.py > "$OUT/native_test.log" 2>&1
echo "rc $?"; tail -15 "$OUT/native_test.log"
echo "== bench_torch host, FATUNE_NATIVE=1 ($(date -u +%T))"
FATUNE_NATIVE=1 timeout 60 python3 bench/bench_torch.py --tables host --json "$OUT/bench_torch_n1.json" \
  > "$OUT/bench_torch_n1.log" 2>&1
echo "rc $?"; grep -E "fatune|FLASH|issue 23" "$OUT/bench_torch_n1.log" | head -12
