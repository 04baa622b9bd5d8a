# After call 3's tunes: the K/V-cache tests, bench_paged and ncu of one
# decoding step, over the run's winners.
set -u
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so FATUNE_DB=$DB
echo "== pytest test_gpu_kvcache ($(date -u +%T))"
timeout 90 python3 -m pytest -q -x python/tests/test_gpu_kvcache.py > "$OUT/pytest_kv.log" 2>&1
echo "rc $?"; tail -3 "$OUT/pytest_kv.log"
echo "== bench_paged ($(date -u +%T))"
mkdir -p "$OUT/b"
timeout 90 python3 bench/bench_paged.py --out "$OUT/b" > "$OUT/bench_paged.log" 2>&1
echo "rc $?"; cat "$OUT/b/bench_paged.md"
echo "== ncu decoding ($(date -u +%T))"
timeout 45 ncu --clock-control none --kernel-name regex:'fat_fwd_mma80|cudnn|flash_fwd' --launch-count 30 \
  --section SpeedOfLight --section WarpStateStats --section InstructionStats \
  -o "$OUT/dec" python3 results/raw/s39/scripts/decode_once.py > "$OUT/ncu.log" 2>&1
echo "ncu rc $?"; grep -vE "^==PROF==" "$OUT/ncu.log" | tail -5
ncu -i "$OUT/dec.ncu-rep" --page raw --csv > "$OUT/dec.csv" 2>/dev/null && python3 bench/ncu_stalls.py "$OUT/dec.csv" > "$OUT/stalls.log" 2>&1
grep -E "^ |duration|long_scoreboard" "$OUT/stalls.log" | head -4
rm -f "$OUT/dec.ncu-rep" "$OUT/dec.csv"
gzip -c "$DB" > "$OUT/run.db.gz"
rm -f "$DB" "$DB"-wal "$DB"-shm
