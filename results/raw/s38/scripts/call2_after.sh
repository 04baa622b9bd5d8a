# After call 2's tunes: the best median of each mode a problem (atomic,
# ordered, ordered shifted) from the run's database, and bench_runtime's
# deterministic column with FATUNE_DB=run.db (its picks: the fastest
# deterministic variant with a full timing).
set -u
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so
echo "== modes ($(date -u +%T))"
python3 - "$DB" <<'PY' 2>&1 | tee "$OUT/modes.log"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
rows = con.execute("""
select p.dtype, p.head_dim, p.seqlen_q, v.params, min(t.median_ms)
from timings t join variants v on v.id = t.variant_id join problems p on p.id = t.problem_id
where t.retired = 0 and p.direction = 'bwd' and p.mask = 'none' group by p.id, v.id""").fetchall()
best = {}
for dt, d, s, params, ms in rows:
    mode = "atomic" if "DQ_MODE=atomic" in params else ("shifted" if "DQ_SHIFT=1" in params else "ordered")
    key = (dt, d, s)
    best.setdefault(key, {})
    if mode not in best[key] or ms < best[key][mode]: best[key][mode] = ms
print(f"{'problem':<22} {'atomic':>8} {'ordered':>8} {'shifted':>8} {'ord/at':>7} {'shf/at':>7} {'shf/ord':>7}")
for key in sorted(best):
    b = best[key]; a, o, s = b.get("atomic"), b.get("ordered"), b.get("shifted")
    r = lambda x, y: f"{x / y:7.3f}" if x and y else "      -"
    f = lambda x: f"{x:8.3f}" if x else "       -"
    print(f"{key[0]} d{key[1]} s{key[2]:<8} {f(a)} {f(o)} {f(s)} {r(o, a)} {r(s, a)} {r(s, o)}")
PY
echo "== failed checks"
sqlite3 "$DB" "select count(*) from checks where passed = 0" 2>/dev/null || python3 -c "
import sqlite3,sys; print(sqlite3.connect('$DB').execute('select count(*) from checks where passed=0').fetchone())"
echo "== bench_runtime bwd d128 bf16, run.db first ($(date -u +%T))"
FATUNE_DB="$DB" timeout 100 python3 bench/bench_runtime.py --direction bwd --head-dims 128 --bwd-dtypes bf16 --memory-seqlen 0 \
  --out "$OUT/bench_bwd_det.json" > "$OUT/bench_bwd_det.log" 2>&1
echo "rc $?"; tail -24 "$OUT/bench_bwd_det.log"
