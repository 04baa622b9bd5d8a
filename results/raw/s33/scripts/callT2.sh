# s33 call T2: the checks compared on the GPU -- the checker's GPU tests
# (worker, reference, kept references, paged, the backward's mma80 and
# wgmma90), then issue 22's cold d128 forward and cold d128 backward.
set -u
PACK=build-gpu8/build-gpu TESTS="worker reference features paged bwd:mma80 bwd:wgmma90" TEST_S=100 TUNE_S=240 \
  TUNE1="--head-dim 128 --json $OUT/cold.json" \
  TUNE2="--direction bwd --head-dim 128 --json $OUT/bwd_all.json" AFTER=build-gpu8/afterT2.sh bash scripts/gpu_call.sh
