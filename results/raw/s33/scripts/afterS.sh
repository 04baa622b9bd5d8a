set -u
rm -f "$DB" "$DB"-wal "$DB"-shm
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['seconds']); print(d.get('tune_seconds')); print(d['evaluations'])" "$OUT/bwd_all.json"
