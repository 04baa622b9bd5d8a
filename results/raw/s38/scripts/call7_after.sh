# After call 7's tunes: each mode's best median a problem (atomic, ordered,
# shifted with one dQ buffer, with two), bench_runtime's deterministic
# column with FATUNE_DB=run.db.
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
    mode = ("atomic" if "DQ_MODE=atomic" in params else "shift2" if "DQ_BUFS=2" in params
            else "shift1" if "DQ_SHIFT=1" in params else "ordered")
    b = best.setdefault((dt, d, m, s), {})
    if mode not in b or ms < b[mode]: b[mode] = ms
modes = ("atomic", "ordered", "shift1", "shift2")
print(f"{'problem':<26}" + "".join(f"{x:>9}" for x in modes) + "  shift2/at shift2/shift1")
for key in sorted(best):
    b = best[key]
    cells = "".join(f"{b[x]:9.3f}" if x in b else f"{'-':>9}" for x in modes)
    r = lambda x, y: f"{b[x] / b[y]:10.3f}" if x in b and y in b else f"{'-':>10}"
    print(f"{key[0]} d{key[1]} {key[2]} s{key[3]:<7}{cells} {r('shift2', 'atomic')} {r('shift2', 'shift1')}")
PY
echo "== failed checks"
python3 -c "
import sqlite3; print(sqlite3.connect('$DB').execute('select count(*) from checks where passed=0').fetchone())"
echo "== bench_runtime bwd d128 bf16, run.db first ($(date -u +%T))"
FATUNE_DB="$DB" timeout 100 python3 bench/bench_runtime.py --direction bwd --head-dims 128 --bwd-dtypes bf16 --memory-seqlen 0 \
  --out "$OUT/bench_bwd_det.json" > "$OUT/bench_bwd_det.log" 2>&1
echo "rc $?"; grep -E "none" "$OUT/bench_bwd_det.log" | head -12
