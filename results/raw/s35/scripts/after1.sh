set -u
[ -s "$DB" ] && { gzip -c "$DB" > "$OUT/run.db.gz"; }
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so
echo "== pytest torch ($(date -u +%T))"
timeout 170 python3 -m pytest -q python/tests/test_gpu_torch.py python/tests/test_gpu_transformers.py > "$OUT/pytest_torch.log" 2>&1
echo "rc $?"; tail -15 "$OUT/pytest_torch.log"
echo "== bench_torch ($(date -u +%T))"
timeout 120 python3 bench/bench_torch.py --json "$OUT/bench_torch.json" > "$OUT/bench_torch.log" 2>&1
echo "rc $?"; tail -60 "$OUT/bench_torch.log"
rm -f "$DB" "$DB"-wal "$DB"-shm
echo "== hostparts ($(date -u +%T))"
timeout 60 python3 results/raw/s35/scripts/hostparts.py 2>&1 | tee "$OUT/hostparts.log" | tail -20
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
*H200*) ;;
*)  # not the H200: issue 22's proof of the shortcut, judged side by side (its new column)
  echo "== fast vs exhaustive ($(date -u +%T))"
  timeout 170 python3 bench/tune_fast_vs_exhaustive.py --fatune $PACK/fatune --gpu 0 --head-dim 128 --out /tmp/fve -- --dtype bf16 > "$OUT/fve.log" 2>&1
  echo "rc $?"; tail -24 "$OUT/fve.log";;
esac
echo "== bench_runtime bwd d128 bf16, deterministic beside ($(date -u +%T))"
timeout 100 python3 bench/bench_runtime.py --direction bwd --head-dims 128 --bwd-dtypes bf16 --memory-seqlen 0 \
  --out "$OUT/bench_bwd_det.json" > "$OUT/bench_bwd_det.log" 2>&1
echo "rc $?"; tail -24 "$OUT/bench_bwd_det.log"
