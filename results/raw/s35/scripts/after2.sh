set -u
"$PACK/fatune" explain --db "$DB" --head-dim 128 --dtype bf16 --seqlen 4096 --batch 4 --heads 16 > "$OUT/explain.log" 2>&1; head -30 "$OUT/explain.log"
gzip -c "$DB" > "$OUT/run.db.gz"; rm -f "$DB" "$DB"-wal "$DB"-shm
for j in cold rerun bwd_all; do echo "== $j"; python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['seconds'], d.get('tune_seconds'), d['evaluations'])" "$OUT/$j.json"; done
echo "== fast vs exhaustive ($(date -u +%T))"
timeout 200 python3 bench/tune_fast_vs_exhaustive.py --fatune $PACK/fatune --gpu 0 --head-dim 128 --out /tmp/fve -- --dtype bf16 > "$OUT/fve.log" 2>&1
echo "rc $?"; tail -24 "$OUT/fve.log"
tar czf "$OUT/fve.tgz" -C /tmp/fve . 2>/dev/null
