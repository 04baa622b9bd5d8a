set -u
B=build-gpu8/build-gpu
. scripts/gpu_unpack.sh; gpu_unpack $B
soname=$(grep -ao 'libfatune\.so\.[0-9]*' "$B/runtime/libfatune.so" | head -1); [ -e "$B/runtime/$soname" ] || ln -s libfatune.so "$B/runtime/$soname"
[ -f "$B/runtime/fatune_tables.db" ] || "$B/build_tables" "$B/runtime/fatune_tables.db" db/tables/*.sql >/dev/null 2>&1
gunzip -c build-gpu8/runA.db.gz > /tmp/runA.db
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$B/runtime/libfatune.so FATUNE_DB=/tmp/runA.db
mkdir -p $OUT/b
timeout 250 python3 bench/bench_kv8.py --out $OUT/b > $OUT/bench_kv8.log 2>&1; echo rc $?
tail -34 $OUT/bench_kv8.log
