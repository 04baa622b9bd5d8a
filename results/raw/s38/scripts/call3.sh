# s38 call 3 (any GPU, <= 560 s): ws15 (the shifted writer polls early and
# releases a step late; notes/kernel-log.md ws15) and the native KV-cache
# call. test_gpu_bwd over the m64n128 DS_STSM=1 DQ_SHIFT=1 variants again
# (the writer changed); the tune of bf16 d128 none s512-16384 over every
# m64n128 DS_STSM=1 variant of each mode (call 2's TUNE1 again, one run);
# the shifted variants alone for fp16 d128 and bf16/fp16 d64; then
# call3_after.sh: each mode's best, bench_runtime's deterministic column on
# this database, the native module's build and test_gpu_native (the
# KV-cache cases), bench_torch's host table with the native path.
#   carry ["build-gpu9"]
set -u
OUT0=${OUT:-$PWD/gpu-out}
P="--direction bwd --family ws90 --mask none --seqlen 512,1024,2048,4096,8192,16384 --timeout 20"
PACK=build-gpu9/build-gpu OUT=$OUT0 TESTS="bwd:ws90" TEST_S=200 TUNE_S=120 \
  TEST_PARAM="DQ_SHIFT=1 BLOCK_M=64 BLOCK_N=128 DS_STSM=1" \
  AFTER=results/raw/s38/scripts/call3_after.sh \
  TUNE1="$P --head-dim 128 --dtype bf16 --param BLOCK_M=64,BLOCK_N=128,DS_STSM=1" \
  TUNE2="$P --head-dim 128,64 --dtype fp16,bf16 --param DQ_SHIFT=1,BLOCK_M=64,BLOCK_N=128" \
  bash scripts/gpu_call.sh 2>&1 | tail -100
