# s33 call Q: the checker's GPU tests, then issue 22's cold d128 forward
# (every dtype, mask, bucket) with the tune stage's phases after the
# threaded comparison, its rerun, and the cold bf16 causal d128 backward.
set -u
PACK=build-gpu8/build-gpu TESTS="worker reference" TEST_S=150 TUNE_S=240 \
  TUNE1="--head-dim 128 --json $OUT/cold.json" TUNE2="--head-dim 128 --json $OUT/rerun.json" \
  TUNE3="--direction bwd --head-dim 128 --dtype bf16 --mask causal --json $OUT/bwd.json" AFTER=build-gpu8/afterP.sh bash scripts/gpu_call.sh
