# After s41's paged re-tune: bench_paged with the run's database as the
# user's (its contiguous rows from the shipped tables), the database last.
set -u
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so
echo "== bench_paged ($(date -u +%T))"
mkdir -p "$OUT/b"
FATUNE_DB=$DB timeout 90 python3 bench/bench_paged.py --out "$OUT/b" > "$OUT/bench_paged.log" 2>&1
echo "rc $?"; cat "$OUT/b/bench_paged.md"
gzip -c "$DB" > "$OUT/run.db.gz"
rm -f "$DB" "$DB"-wal "$DB"-shm
