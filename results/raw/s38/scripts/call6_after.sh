set -u
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so FATUNE_NATIVE_DIR=/tmp/fatune-native
echo "== test_gpu_native ($(date -u +%T))"
timeout 150 python3 -m pytest -q python/tests/test_gpu_native.py > "$OUT/native_test.log" 2>&1
echo "rc $?"; tail -4 "$OUT/native_test.log"
