# s35's call2.sh on the s36 pack (build-gpu9: the tables' ws90 backward variants were rehashed in 10eccb4, so s35's pack, whose generator predates it, would leave them out as stale).
# s35 call 2: issue 22's headline on the GPU given -- cold `--head-dim 128`,
# its rerun, cold `--direction bwd --head-dim 128` (fresh database), then
# the fast path against exhaustive timing, bf16 d128 forward, judged side
# by side.
set -u
PACK=build-gpu9/build-gpu TUNE_S=200 \
  TUNE1="--head-dim 128 --json $OUT/cold.json" TUNE2="--head-dim 128 --json $OUT/rerun.json" \
  TUNE3="--direction bwd --head-dim 128 --json $OUT/bwd_all.json" AFTER=results/raw/s35/scripts/after2.sh bash scripts/gpu_call.sh
