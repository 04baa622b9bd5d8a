# Validation after the runtime's decoding changes: the C GPU tests of the
# runtime, then the Python binding's GPU tests.
set -u
cat > /tmp/afterV.sh <<'AEOF'
set -u
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so
for t in test_fatune test_api test_ops test_gpu_torch test_gpu_transformers; do
  echo "== pytest $t ($(date -u +%T))"
  timeout 150 python3 -m pytest -q -x -p no:cacheprovider python/tests/$t.py > "$OUT/py_$t.log" 2>&1
  echo "rc $?"; tail -3 "$OUT/py_$t.log"
done
AEOF
PACK=build-gpu8/build-gpu TESTS="runtime features paged runtime_context" TEST_S=150 AFTER=/tmp/afterV.sh bash scripts/gpu_call.sh
