# s40 (after call 3's tunes, from call3_after.sh): issue 19's short-sequence
# gap (the forward 0.91-0.98x cuDNN at s1024, notes/kernel-log.md f28/f29:
# "wait" stalls not yet attributed). ncu with source counters of one
# forward each, fatune's shipped winner then SDPA's cuDNN, bf16 s1024 (16 x
# 16 heads at d128, 16 x 32 at d64): d128 none, d128 causal, d64 causal.
# Per kernel: the stall table (ncu_stalls.py), the by-opcode sums
# (ncu_sass.py), and the per-instruction CSVs in src.tgz for the per-PC
# reading here. Needs PYTHONPATH and FATUNE_LIB set, $OUT.
set -u
mkdir -p "$OUT/src"
for cfg in "128 none" "128 causal" "64 causal"; do
  set -- $cfg; d=$1; m=$2; tag=d${d}_$m
  flag=""; [ "$m" = causal ] && flag=--causal
  echo "== ncu $tag ($(date -u +%T))"
  timeout 80 ncu --clock-control none --kernel-name regex:'fat_fwd|cudnn' --launch-count 2 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --section SourceCounters --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
    -o "$OUT/$tag" python3 bench/profile_bwd.py --direction fwd --peer cudnn --head-dim "$d" --seqlen 1024 $flag \
    > "$OUT/ncu_$tag.log" 2>&1
  echo "ncu rc $?"; grep -vE "^==PROF==|^==WARNING==" "$OUT/ncu_$tag.log" | tail -4
  ncu -i "$OUT/$tag.ncu-rep" --page raw --csv > "$OUT/$tag.csv" && python3 bench/ncu_stalls.py "$OUT/$tag.csv" 2>&1 | tee "$OUT/stalls_$tag.log" | head -40
  ncu -i "$OUT/$tag.ncu-rep" --page details > "$OUT/src/details_$tag.txt" 2>&1
  for k in fat_fwd cudnn; do
    ncu -i "$OUT/$tag.ncu-rep" --kernel-name regex:"$k" --page source --csv --print-source sass \
      > "$OUT/src/${k}_$tag.csv" 2>/dev/null && python3 bench/ncu_sass.py "$OUT/src/${k}_$tag.csv" --top 22 2>&1 | tee "$OUT/src/sass_${k}_$tag.log" | head -30
  done
  rm -f "$OUT/$tag.csv"
done
(cd "$OUT" && tar czf src.tgz src *.ncu-rep && rm -rf src *.ncu-rep)
