# After call 2's tunes: the binding's K/V-cache tests and bench_paged over
# the run's winners, then ncu of one decoding step at batch 1, 131072 keys.
set -u
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so FATUNE_DB=$DB
echo "== pytest test_gpu_kvcache ($(date -u +%T))"
timeout 100 python3 -m pytest -q -x python/tests/test_gpu_kvcache.py > "$OUT/pytest_kv.log" 2>&1
echo "rc $?"; tail -3 "$OUT/pytest_kv.log"
echo "== bench_paged ($(date -u +%T))"
mkdir -p "$OUT/b"
timeout 150 python3 bench/bench_paged.py --out "$OUT/b" > "$OUT/bench_paged.log" 2>&1
echo "rc $?"; cat "$OUT/b/bench_paged.md"
echo "== ncu decoding ($(date -u +%T))"
timeout 90 ncu --clock-control none --kernel-name regex:'fat_fwd_mma80|cudnn|flash_fwd' --launch-count 30 \
  --section SpeedOfLight --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis \
  -o "$OUT/dec" python3 results/raw/s39/scripts/decode_once.py > "$OUT/ncu.log" 2>&1
echo "ncu rc $?"; grep -vE "^==PROF==" "$OUT/ncu.log" | tail -6
ncu -i "$OUT/dec.ncu-rep" --page raw --csv > "$OUT/dec.csv" 2>/dev/null && python3 bench/ncu_stalls.py "$OUT/dec.csv" 2>&1 | tee "$OUT/stalls.log" | head -40
(cd "$OUT" && tar czf dec.tgz dec.ncu-rep 2>/dev/null && rm -f dec.ncu-rep dec.csv)
gzip -c "$DB" > "$OUT/run.db.gz"; rm -f "$DB" "$DB"-wal "$DB"-shm
