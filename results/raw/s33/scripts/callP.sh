# s33 call P: on an H200 the forward ws90 re-tune of d64/d96 (waiting since
# the 25th session) and bench_fwd from it; on an H100 issue 22's cold d128
# forward with the tune stage's phases, its rerun, and a cold bf16 causal
# d128 backward with its phases.
set -u
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "GPU: $name"
case "$name" in
*H200*)
  PACK=build-gpu8/build-gpu TUNE_S=300 TUNE1="--family ws90 --head-dim 64,96 --dtype bf16,fp16 --seqlen 512,1024,2048,4096,8192,16384" \
    AFTER=build-gpu8/after1.sh bash scripts/gpu_call.sh;;
*)
  PACK=build-gpu8/build-gpu TUNE_S=240 TUNE1="--head-dim 128 --json $OUT/cold.json" TUNE2="--head-dim 128 --json $OUT/rerun.json" \
    TUNE3="--direction bwd --head-dim 128 --dtype bf16 --mask causal --json $OUT/bwd.json" AFTER=build-gpu8/afterP.sh bash scripts/gpu_call.sh;;
esac
