# s38 call 5 (any GPU, <= 200 s): where the ordered (deterministic) ws90
# backward's 13-23 % goes (notes/kernel-log.md ws15 measured, "left for a
# profile"): ncu of fatune's default backward (the H100 table's atomic
# winner) and its deterministic one (the table's DQ_SHIFT pick since
# 16a95bd) at bf16 d128 none s4096, beside FlashAttention-2's, SpeedOfLight,
# WarpStateStats, InstructionStats, SourceCounters; bench/ncu_stalls.py's
# table; per-instruction SASS of both fatune kernels (bench/ncu_sass.py).
#   carry ["build-gpu9"]
set -u
ROOT=$PWD
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
B=build-gpu9/build-gpu
. scripts/gpu_unpack.sh; gpu_unpack "$B" || exit 2
soname=$(grep -ao 'libfatune\.so\.[0-9]*' "$B/runtime/libfatune.so" | head -1)
[ -e "$B/runtime/$soname" ] || ln -s libfatune.so "$B/runtime/$soname"
[ -f "$B/runtime/fatune_tables.db" ] || "$B/build_tables" "$B/runtime/fatune_tables.db" db/tables/*.sql > /dev/null
export PYTHONPATH=$ROOT/python FATUNE_LIB=$ROOT/$B/runtime/libfatune.so
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
timeout 150 ncu --clock-control none --kernel-name regex:'fat_bwd_ws90|flash_bwd_dq_dk_dv' --launch-count 3 \
  --section SpeedOfLight --section WarpStateStats --section InstructionStats --section SourceCounters \
  --section MemoryWorkloadAnalysis \
  -o "$OUT/prof" python3 bench/profile_bwd.py --head-dim 128 --seqlen 4096 --deterministic > "$OUT/ncu.log" 2>&1
echo "ncu rc $?"; grep -E "fatune|profiled|==PROF==|ERR" "$OUT/ncu.log" | head -12
ncu -i "$OUT/prof.ncu-rep" --page raw --csv > "$OUT/prof.csv" && python3 bench/ncu_stalls.py "$OUT/prof.csv" 2>&1 | tee "$OUT/stalls.log" | head -60
ncu -i "$OUT/prof.ncu-rep" --page details > "$OUT/details.txt" 2>&1; grep -E "Duration|Throughput|Registers|Memory \[%\]|L2 Hit|DRAM" "$OUT/details.txt" | head -60
for i in 0 1; do
  ncu -i "$OUT/prof.ncu-rep" --kernel-id ::regex:fat_bwd_ws90:$((i + 1)) --page source --csv \
    --print-source sass > "$OUT/sass_$i.csv" 2>/dev/null && python3 bench/ncu_sass.py "$OUT/sass_$i.csv" 2>&1 | head -40 | tee "$OUT/sass_$i.log"
done
(cd "$OUT" && tar czf prof.tgz prof.ncu-rep sass_0.csv sass_1.csv && rm -f prof.ncu-rep sass_0.csv sass_1.csv prof.csv)
bash scripts/fit_out.sh "$OUT" | tail -5
