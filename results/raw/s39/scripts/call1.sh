# s39 call 1 (<= 560 s). On an H200: issue 23's H200 cells -- the torch GPU
# tests (test_gpu_torch: dynamo, compile, CUDA graphs; transformers within
# 1.2x; the native module's; the KV-cache call's) and bench_torch's three
# tables (graphs, host with both paths, the 4-layer model at seqlen 8192).
# On any other GPU: ncu of one decoding step at batch 1, 131072 keys, one
# query (contiguous; pages of 16 and 256; cuDNN, FA2), the paged path's cost
# (notes/kernel-log.md p5), before its change.
#   carry ["build-gpu9"]
set -u
ROOT=$PWD
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/call.log") 2>&1
B=build-gpu9/build-gpu
. scripts/gpu_unpack.sh; gpu_unpack "$B" || exit 2
soname=$(grep -ao 'libfatune\.so\.[0-9]*' "$B/runtime/libfatune.so" | head -1)
[ -e "$B/runtime/$soname" ] || ln -s libfatune.so "$B/runtime/$soname"
[ -f "$B/runtime/fatune_tables.db" ] || "$B/build_tables" "$B/runtime/fatune_tables.db" db/tables/*.sql > /dev/null
export PYTHONPATH=$ROOT/python FATUNE_LIB=$ROOT/$B/runtime/libfatune.so FATUNE_NATIVE_DIR=/tmp/fatune-native
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
case "$name" in
*H200*)
  echo "== native build ($(date -u +%T))"
  timeout 90 python3 -m fatune.native build > "$OUT/native_build.log" 2>&1; echo "rc $?"; tail -2 "$OUT/native_build.log"
  echo "== pytest ($(date -u +%T))"
  timeout 260 python3 -m pytest -q python/tests/test_gpu_torch.py python/tests/test_gpu_transformers.py \
    python/tests/test_gpu_native.py python/tests/test_gpu_kvcache.py > "$OUT/pytest.log" 2>&1
  echo "rc $?"; tail -15 "$OUT/pytest.log"
  for mode in 0 1; do
    tables=host; [ $mode = 1 ] && tables=graphs,host,model
    echo "== bench_torch $tables, FATUNE_NATIVE=$mode ($(date -u +%T))"
    FATUNE_NATIVE=$mode timeout 150 python3 bench/bench_torch.py --tables $tables --json "$OUT/bench_torch_n$mode.json" \
      > "$OUT/bench_torch_n$mode.log" 2>&1
    echo "rc $?"; tail -40 "$OUT/bench_torch_n$mode.log"
  done;;
*)
  echo "== ncu decoding ($(date -u +%T))"
  timeout 200 ncu --clock-control none --kernel-name regex:'fat_fwd_mma80|cudnn|flash_fwd' --launch-count 30 \
    --section SpeedOfLight --section WarpStateStats --section InstructionStats --section SourceCounters \
    --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
    -o "$OUT/dec" python3 results/raw/s39/scripts/decode_once.py > "$OUT/ncu.log" 2>&1
  echo "ncu rc $?"; grep -vE "^==PROF==" "$OUT/ncu.log" | tail -8
  ncu -i "$OUT/dec.ncu-rep" --page raw --csv > "$OUT/dec.csv" && python3 bench/ncu_stalls.py "$OUT/dec.csv" 2>&1 | tee "$OUT/stalls.log" | head -50
  ncu -i "$OUT/dec.ncu-rep" --page details > "$OUT/details.txt" 2>&1
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Registers Per|Grid Size|Achieved Occupancy" "$OUT/details.txt" | head -120
  for i in 3 6; do  # the third contiguous launch and the third page-16 one (ids count the main kernels)
    ncu -i "$OUT/dec.ncu-rep" --kernel-id ::regex:'fat_fwd_mma80$':$i --page source --csv --print-source sass \
      > "$OUT/sass_$i.csv" 2>/dev/null && python3 bench/ncu_sass.py "$OUT/sass_$i.csv" 2>&1 | head -40 | tee "$OUT/sass_$i.log"
  done
  (cd "$OUT" && tar czf dec.tgz dec.ncu-rep sass_*.csv && rm -f dec.ncu-rep sass_*.csv dec.csv);;
esac
bash scripts/fit_out.sh "$OUT" | tail -5
echo "== done ($(date -u +%T))"
