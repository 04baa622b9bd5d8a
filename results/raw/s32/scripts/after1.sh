# call 1's after-script: the forward benchmark against SDPA with the run's winners first.
set -u
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so FATUNE_DB=$DB
echo "== bench_fwd ($(date -u +%T))"
timeout 220 python3 bench/bench_fwd.py --head-dims 64,96,128 --dtypes bf16 --seqlens 1024,2048,4096,8192,16384 \
  --out "$OUT/bench_fwd.json" > "$OUT/bench_fwd.log" 2>&1
echo "rc $?"; tail -40 "$OUT/bench_fwd.log"
