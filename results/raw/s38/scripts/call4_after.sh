# After call 4's tunes: each mode's best median a problem (atomic, ordered,
# shifted) by mask, and bench_runtime's deterministic column with
# FATUNE_DB=run.db (bf16 d128, none and causal).
set -u
export PYTHONPATH=$PWD/python FATUNE_LIB=$PWD/$PACK/runtime/libfatune.so
echo "== modes ($(date -u +%T))"
python3 - "$DB" <<'PY' 2>&1 | tee "$OUT/modes.log"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
rows = con.execute("""
select p.dtype, p.head_dim, p.mask, p.seqlen_q, v.params, min(t.median_ms)
from timings t join variants v on v.id = t.variant_id join problems p on p.id = t.problem_id
where t.retired = 0 and p.direction = 'bwd' group by p.id, v.id""").fetchall()
best = {}
for dt, d, m, s, params, ms in rows:
    mode = "atomic" if "DQ_MODE=atomic" in params else ("shifted" if "DQ_SHIFT=1" in params else "ordered")
    b = best.setdefault((dt, d, m, s), {})
    if mode not in b or ms < b[mode]: b[mode] = ms
print(f"{'problem':<28} {'atomic':>8} {'ordered':>8} {'shifted':>8} {'ord/at':>7} {'shf/at':>7} {'shf/ord':>7}")
for key in sorted(best):
    b = best[key]; a, o, s = b.get("atomic"), b.get("ordered"), b.get("shifted")
    r = lambda x, y: f"{x / y:7.3f}" if x and y else "      -"
    f = lambda x: f"{x:8.3f}" if x else "       -"
    print(f"{key[0]} d{key[1]} {key[2]:<6} s{key[3]:<7} {f(a)} {f(o)} {f(s)} {r(o, a)} {r(s, a)} {r(s, o)}")
PY
echo "== failed checks"
python3 -c "
import sqlite3; print(sqlite3.connect('$DB').execute('select count(*) from checks where passed=0').fetchone())"
echo "== bench_runtime bwd d128 bf16, run.db first ($(date -u +%T))"
FATUNE_DB="$DB" timeout 100 python3 bench/bench_runtime.py --direction bwd --head-dims 128 --bwd-dtypes bf16 --memory-seqlen 0 \
  --out "$OUT/bench_bwd_det.json" > "$OUT/bench_bwd_det.log" 2>&1
echo "rc $?"; tail -24 "$OUT/bench_bwd_det.log"
