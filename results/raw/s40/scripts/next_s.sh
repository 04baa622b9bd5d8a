# NEXT_S's first GPU run (kernel-log f31), any H100 or H200, <= 300 s, on a
# pack built from a tree with notes/patches/ws90-next-s.patch applied
# (the tuner and test_gpu_ws90 read the pack's built-in templates; the
# tables here are not needed): test_gpu_ws90 over the bf16 NEXT_S 1
# variants, then a tune of the ws90 bf16 d64 and d128 space without
# pingpong (NEXT_S 0 and 1 side by side), none and causal, s1024 and
# s2048, and bench/param_best.py's table of each value's best per problem.
#   carry ["build-gpu10"]
set -u
export FATUNE_TEST_DTYPE=bf16
PACK=build-gpu10/build-gpu TESTS="ws90" TEST_PARAM=NEXT_S=1 TEST_S=100 TUNE_S=150 \
  AFTER=results/raw/s40/scripts/next_s_after.sh \
  TUNE1="--family ws90 --head-dim 64,128 --dtype bf16 --mask none,causal --seqlen 1024,2048 --param PINGPONG=0 --timeout 20" \
  bash scripts/gpu_call.sh 2>&1 | tail -120
