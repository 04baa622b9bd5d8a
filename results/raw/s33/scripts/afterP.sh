set -u
ls -la "$DB"; rm -f "$DB" "$DB"-wal "$DB"-shm
for j in cold rerun bwd; do echo "== $j"; python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['seconds']); print(d.get('tune_seconds'))" "$OUT/$j.json"; done
