set -u
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so
echo "== param_best DQ_MODE ($(date -u +%T))"
python3 bench/param_best.py "$DB" --family ws90 --param DQ_MODE --base atomic 2>&1 | tee "$OUT/param_best.log" | tail -30
echo "== failed checks"
python3 - "$DB" <<'PY' 2>&1 | tail -30
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
rows = con.execute("select v.name, c.seqlen_q, c.seqlen_k, c.reason from checks c join variants v on v.id = c.variant_id where c.passed = 0 order by v.name").fetchall()
print(len(rows), "failed checks")
for r in rows[:25]: print(*r)
PY
echo "== bench_runtime bwd d128 bf16, run.db first ($(date -u +%T))"
FATUNE_DB="$DB" timeout 90 python3 bench/bench_runtime.py --direction bwd --head-dims 128 --bwd-dtypes bf16 --memory-seqlen 0 \
  --out "$OUT/bench_bwd_det.json" > "$OUT/bench_bwd_det.log" 2>&1
echo "rc $?"; tail -24 "$OUT/bench_bwd_det.log"
