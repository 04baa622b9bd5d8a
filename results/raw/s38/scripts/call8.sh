# s38 call 8 (any GPU, <= 220 s): ws19, DQ_SHIFT's poll without an L1
# invalidation a round (ld.relaxed, then one fence.acq_rel;
# notes/kernel-log.md ws19). test_gpu_bwd over the m64n128 STATS_AHEAD=0
# DQ_SHIFT=1 variants; the tune of bf16 d128 none s512-16384 over every
# m64n128 DQ_KEYS=0 variant of each mode (one run, side by side); the
# DQ_SHIFT=1 m64n128 variants for fp16 d128 and bf16/fp16 d64 (the H100
# table's shifted picks, re-tuned); call4_after.sh (modes, bench_runtime).
#   carry ["build-gpu9"]
set -u
OUT0=${OUT:-$PWD/gpu-out}
P="--direction bwd --family ws90 --mask none --seqlen 512,1024,2048,4096,8192,16384 --timeout 20"
PACK=build-gpu9/build-gpu OUT=$OUT0 TESTS="bwd:ws90" TEST_S=70 TUNE_S=70 \
  TEST_PARAM="DQ_SHIFT=1 BLOCK_M=64 BLOCK_N=128 STATS_AHEAD=0" \
  AFTER=results/raw/s38/scripts/call4_after.sh \
  TUNE1="$P --head-dim 128 --dtype bf16 --param BLOCK_M=64,BLOCK_N=128,DQ_KEYS=0" \
  TUNE2="$P --head-dim 128,64 --dtype fp16,bf16 --param DQ_SHIFT=1,BLOCK_M=64,BLOCK_N=128" \
  bash scripts/gpu_call.sh 2>&1 | tail -100
