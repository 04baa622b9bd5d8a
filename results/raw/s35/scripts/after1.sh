set -u
[ -s "$DB" ] && { gzip -c "$DB" > "$OUT/run.db.gz"; }
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so
echo "== pytest torch ($(date -u +%T))"
timeout 200 python3 -m pytest -q python/tests/test_gpu_torch.py python/tests/test_gpu_transformers.py > "$OUT/pytest_torch.log" 2>&1
echo "rc $?"; tail -15 "$OUT/pytest_torch.log"
echo "== bench_torch ($(date -u +%T))"
timeout 120 python3 bench/bench_torch.py --json "$OUT/bench_torch.json" > "$OUT/bench_torch.log" 2>&1
echo "rc $?"; tail -60 "$OUT/bench_torch.log"
rm -f "$DB" "$DB"-wal "$DB"-shm
echo "== hostparts ($(date -u +%T))"
timeout 60 python3 results/raw/s35/scripts/hostparts.py 2>&1 | tee "$OUT/hostparts.log" | tail -20
