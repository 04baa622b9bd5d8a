set -u
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "GPU: $name"
case "$name" in
  *H200*) exec bash build-gpu8/callA.sh;;
esac
B=build-gpu8/build-gpu
. scripts/gpu_unpack.sh; gpu_unpack $B
soname=$(grep -ao 'libfatune\.so\.[0-9]*' "$B/runtime/libfatune.so" | head -1); [ -e "$B/runtime/$soname" ] || ln -s libfatune.so "$B/runtime/$soname"
[ -f "$B/runtime/fatune_tables.db" ] || "$B/build_tables" "$B/runtime/fatune_tables.db" db/tables/*.sql >/dev/null 2>&1
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$B/runtime/libfatune.so
for d in bf16 fp16; do
  mkdir -p $OUT/$d
  echo "== bench_kv8 $d (shipped tables) $(date -u +%T)"
  timeout 200 python3 bench/bench_kv8.py --dtype $d --out $OUT/$d > $OUT/$d/log 2>&1; echo rc $?
  cat $OUT/$d/*.md | head -40
done
