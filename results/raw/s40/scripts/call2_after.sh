# After s40 call 2's tunes: bench_kv8 over the run's winners, then
# results/raw/s39/scripts/call3_after.sh (test_gpu_kvcache, bench_paged,
# ncu of one decoding step; it packs the database last).
set -u
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so FATUNE_DB=$DB
echo "== bench_kv8 ($(date -u +%T))"
mkdir -p "$OUT/k"
timeout 70 python3 bench/bench_kv8.py --out "$OUT/k" > "$OUT/bench_kv8.log" 2>&1
echo "rc $?"; cat "$OUT/k/"*.md 2>/dev/null | head -40
bash results/raw/s39/scripts/call3_after.sh
