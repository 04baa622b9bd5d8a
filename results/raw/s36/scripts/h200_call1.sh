# s35's call1.sh on the s36 pack (build-gpu9: the tables' ws90 backward variants were rehashed in 10eccb4, so s35's pack, whose generator predates it, would leave them out as stale).
# s35 call 1 (H200): the forward ws90 d64/d96 re-tune waiting since the 32nd
# (BLOCK_M 192 at d64, SLAB 32 at d96), then the after-script: the torch
# GPU tests on the eager path (notes/patches/issue23-eager-path.mbox,
# applied) and bench_torch.py's tables.
set -u
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "GPU: $name"
T1=""
case "$name" in *H200*) T1="--family ws90 --head-dim 64,96 --dtype bf16,fp16 --seqlen 512,1024,2048,4096,8192,16384";; esac
PACK=build-gpu9/build-gpu TUNE_S=200 TUNE1="$T1" AFTER=results/raw/s35/scripts/after1.sh bash scripts/gpu_call.sh
