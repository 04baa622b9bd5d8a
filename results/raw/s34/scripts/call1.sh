# s34 call 1: the kept references' guard (fingerprints) on the GPU -- the
# checker's GPU tests (worker, reference, features with the guard's three
# cases, paged, the backward's wgmma90), then cold d128 forward and
# backward (issue 22's figures, and what the guard costs them).
set -u
PACK=build-gpu8/build-gpu TESTS="worker reference features paged bwd:wgmma90" TEST_S=150 TUNE_S=240 \
  TUNE1="--head-dim 128 --json $OUT/cold.json" \
  TUNE2="--direction bwd --head-dim 128 --json $OUT/bwd_all.json" AFTER=results/raw/s34/scripts/after1.sh bash scripts/gpu_call.sh
