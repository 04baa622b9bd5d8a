# After next_s.sh's tune: NEXT_S's A/B by problem (full timings only).
set -u
python3 bench/param_best.py "$DB" --family ws90 --param NEXT_S --base 0 2>&1 | tee "$OUT/next_s_ab.log"
python3 bench/param_best.py "$DB" --family ws90 --param PINGPONG --base 0 2>&1 | tail -12
