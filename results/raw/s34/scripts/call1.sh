# s34 call 1: the kept references' guard (fingerprints) and the screening's
# cutoff on the GPU -- the checker's GPU tests (worker with the cutoff's
# cases, reference, features with the guard's three cases, paged, the
# backward's wgmma90), then cold d128 forward, its rerun and cold backward
# (issue 22), then bench_torch.py (issue 23's tables).
set -u
PACK=build-gpu8/build-gpu TESTS="worker reference features paged bwd:wgmma90" TEST_S=150 TUNE_S=240 \
  TUNE1="--head-dim 128 --json $OUT/cold.json" TUNE2="--head-dim 128 --json $OUT/rerun.json" \
  TUNE3="--direction bwd --head-dim 128 --json $OUT/bwd_all.json" AFTER=results/raw/s34/scripts/after1.sh bash scripts/gpu_call.sh
