# s33 call S: issue 22's cold d128 backward, every dtype, mask and bucket.
set -u
PACK=build-gpu8/build-gpu TUNE_S=500 TUNE1="--direction bwd --head-dim 128 --json $OUT/bwd_all.json" AFTER=build-gpu8/afterS.sh bash scripts/gpu_call.sh
