# NEXT_S's first GPU run (notes/patches/ws90-next-s.patch applied in the
# tree and the pack; kernel-log f31), any H100 or H200, <= 400 s:
# test_gpu_ws90 over the bf16 NEXT_S 1 variants, then one exhaustive tune
# of the ws90 bf16 d64 and d128 space, none and causal, s1024/2048/4096
# (NEXT_S 0 and 1 side by side, the rest of the space free), and
# bench/param_best.py's table of the best of each value per problem.
#   carry ["build-gpu9"]
set -u
export FATUNE_TEST_DTYPE=bf16
PACK=build-gpu9/build-gpu TESTS="ws90" TEST_PARAM=NEXT_S=1 TEST_S=120 TUNE_S=230 \
  AFTER=results/raw/s40/scripts/next_s_after.sh \
  TUNE1="--family ws90 --exhaustive --head-dim 64,128 --dtype bf16 --mask none,causal --seqlen 1024,2048,4096 --timeout 20" \
  bash scripts/gpu_call.sh 2>&1 | tail -120
