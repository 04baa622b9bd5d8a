# s38 call 7 (any GPU, <= 360 s): ws18, DQ_BUFS 2 (two dQ staging buffers
# for the shifted ordered writer; notes/kernel-log.md ws17/ws18).
# test_gpu_bwd over the DQ_BUFS=2 STATS_AHEAD=0 variants; the tune of bf16
# d128 none s512-16384 over every m64n128 DQ_KEYS=0 variant of each mode
# (atomic, ordered, shifted, shifted with two buffers: one run, side by
# side); the DQ_BUFS=2 variants alone for fp16 d128, bf16/fp16 d64 and d96;
# then call7_after.sh (each mode's best, bench_runtime's deterministic
# column on this database, bf16 d128 none).
#   carry ["build-gpu9"]
set -u
OUT0=${OUT:-$PWD/gpu-out}
P="--direction bwd --family ws90 --mask none --seqlen 512,1024,2048,4096,8192,16384 --timeout 20"
PACK=build-gpu9/build-gpu OUT=$OUT0 TESTS="bwd:ws90" TEST_S=200 TUNE_S=150 \
  TEST_PARAM="DQ_BUFS=2 STATS_AHEAD=0" \
  AFTER=results/raw/s38/scripts/call7_after.sh \
  TUNE1="$P --head-dim 128 --dtype bf16 --param BLOCK_M=64,BLOCK_N=128,DQ_KEYS=0" \
  TUNE2="$P --head-dim 128,96,64 --dtype fp16,bf16 --param DQ_BUFS=2" \
  bash scripts/gpu_call.sh 2>&1 | tail -100
