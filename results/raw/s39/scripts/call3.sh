# s39 call 3 (any GPU, <= 280 s): the contiguous launch-chosen splits'
# combine (splitkv SPLITS 0: a chunk of splits' loads issued together, four
# columns a lane; notes/kernel-log.md p6). Every H100 table problem whose
# winner was a splitkv SPLITS 0 variant (55 winners, retired) re-tuned on
# SPLITS 0 variants -- bf16 none and causal, fp16 and the two fp8 caches
# causal, over the grids they came from (the merge takes a SPLITS 0 winner
# elsewhere only where it is clearly faster) -- then call3_after.sh:
# test_gpu_kvcache, bench_paged (its contiguous column), ncu of one
# decoding step.
#   carry ["build-gpu9"]
set -u
D="--head-dim 128 --timeout 20"
export CALL_T0=$(date +%s)
PACK=build-gpu9/build-gpu TUNE_S=150 \
  AFTER=results/raw/s39/scripts/call3_after.sh \
  TUNE1="$D --family splitkv --param SPLITS=0 --dtype bf16 --mask none,causal --seqlen 1,4,8,16 --seqlen-k 4096,32768,65536,131072 --gqa 4,8" \
  TUNE2="$D --family splitkv --param SPLITS=0 --dtype fp16,bf16-e4m3kv,fp16-e4m3kv --mask causal --seqlen 1,4,16 --seqlen-k 4096,32768,131072 --gqa 4,8" \
  bash scripts/gpu_call.sh 2>&1 | tail -150
