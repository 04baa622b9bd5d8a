set -u
grep -h "kept fp64 reference\|wrote outside" "$OUT"/tune*.log | head -5
"$PACK/fatune" explain --db "$DB" --head-dim 128 --dtype bf16 --seqlen 4096 --batch 4 --heads 16 > "$OUT/explain.log" 2>&1; head -40 "$OUT/explain.log"
gzip -c "$DB" > "$OUT/run.db.gz"; rm -f "$DB" "$DB"-wal "$DB"-shm
for j in cold rerun bwd_all; do echo "== $j"; python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['seconds']); print(d.get('tune_seconds')); print(d['evaluations'])" "$OUT/$j.json"; done
echo "== bench_torch ($(date -u +%T))"
PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so timeout 200 python3 bench/bench_torch.py --json "$OUT/bench_torch.json" > "$OUT/bench_torch.log" 2>&1
echo "rc $?"; tail -60 "$OUT/bench_torch.log"
