# s34 call 3: what the fast and exhaustive databases of call 2 say of the
# problems over the 2 % bar: each winner's timings (repetitions, median, SM
# clock, in a job or alone) in both runs, and the fast run's elimination row.
import sqlite3, sys
PROBS = [("causal", 16384), ("causal", 8192), ("none", 16384), ("none", 8192)]
WIN = {("causal", 16384): ("m128n128s2Od", "m128n176s2O"), ("causal", 8192): ("m128n128s2Od", "m128n128s2O"),
       ("none", 16384): ("m128n176s2r", "m128n176s2Or"), ("none", 8192): ("m128n176s2r", "m128n176s2Or")}
for run in ("exhaustive", "fast"):
    db = sqlite3.connect(f"/tmp/fve/fwd-d128-{run}.db")
    for mask, s in PROBS:
        for short in WIN[(mask, s)]:
            name = f"fwd.ws90.bf16.d128.{mask}.{short}"
            rows = db.execute("""select t.id, t.reps, round(t.median_ms,4), t.sm_clock_mhz,
                (select count(*) from timing_jobs j where j.timing_id = t.id)
                from timings t join variants v on v.id = t.variant_id join problems p on p.id = t.problem_id
                where p.direction='fwd' and p.dtype='bf16' and p.mask=? and p.seqlen_q=? and v.name=? order by t.id""",
                (mask, s, name)).fetchall()
            el = []
            if run == "fast":
                try:
                    el = db.execute("""select e.* from eliminations e join timings t on t.id = e.timing_id
                        join variants v on v.id = t.variant_id join problems p on p.id = e.problem_id
                        where p.direction='fwd' and p.dtype='bf16' and p.mask=? and p.seqlen_q=? and v.name=?""",
                        (mask, s, name)).fetchall()
                except Exception as ex:
                    el = [str(ex)]
            print(run, mask, s, short, rows, "elim:", el)
