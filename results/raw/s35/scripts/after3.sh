set -u
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so FATUNE_DB=$DB
echo "== pytest test_gpu_kvcache ($(date -u +%T))"
timeout 100 python3 -m pytest -q -x python/tests/test_gpu_kvcache.py > "$OUT/pytest_kv.log" 2>&1
echo "rc $?"; tail -3 "$OUT/pytest_kv.log"
echo "== bench_kv8 ($(date -u +%T))"
mkdir -p "$OUT/b"
timeout 150 python3 bench/bench_kv8.py --out "$OUT/b" > "$OUT/bench_kv8.log" 2>&1
echo "rc $?"; tail -32 "$OUT/bench_kv8.log"
gzip -c "$DB" > "$OUT/run.db.gz"; rm -f "$DB" "$DB"-wal "$DB"-shm
