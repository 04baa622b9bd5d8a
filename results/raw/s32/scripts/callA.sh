set -u
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "GPU: $name"
K="--head-dim 128 --mask causal --gqa 4,8 --seqlen 1,4,16 --seqlen-k 4096,32768,131072"
T3=""; T4=""
case "$name" in *H200*) T3="--dtype bf16 --family splitkv $K"; T4="--dtype bf16 --family paged --paged 64 $K";; esac
PACK=build-gpu8/build-gpu TESTS="paged" TEST_S=150 TUNE_S=120 \
  TUNE1="--dtype bf16-e4m3kv --family splitkv $K" TUNE2="--dtype bf16-e4m3kv --family paged --paged 64 $K" \
  TUNE3="$T3" TUNE4="$T4" AFTER=build-gpu8/afterA.sh bash scripts/gpu_call.sh
