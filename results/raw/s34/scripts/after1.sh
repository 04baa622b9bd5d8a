set -u
grep -h "kept fp64 reference\|wrote outside" "$OUT"/tune*.log | head -5
rm -f "$DB" "$DB"-wal "$DB"-shm
for j in cold bwd_all; do echo "== $j"; python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['seconds']); print(d.get('tune_seconds')); print(d['evaluations'])" "$OUT/$j.json"; done
