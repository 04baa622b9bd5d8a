# After call 2's tune: the host table again, Python and native paths, on
# the tree with the leaner eager() and options memo (RESULTS.md "the
# native host path" has call 1's).
set -u
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so FATUNE_NATIVE_DIR=/tmp/fatune-native
echo "== native build ($(date -u +%T))"
timeout 90 python3 -m fatune.native build > "$OUT/native_build.log" 2>&1; echo "rc $?"
for mode in 0 1; do
  echo "== bench_torch host, FATUNE_NATIVE=$mode ($(date -u +%T))"
  FATUNE_NATIVE=$mode timeout 60 python3 bench/bench_torch.py --tables host --json "$OUT/bench_torch_n$mode.json" \
    > "$OUT/bench_torch_n$mode.log" 2>&1
  echo "rc $?"; grep -E "fatune|FLASH|issue 23" "$OUT/bench_torch_n$mode.log" | head -12
done
