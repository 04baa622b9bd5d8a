set -u
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "GPU: $name"
case "$name" in
*H200*)
  PACK=build-gpu8/build-gpu TUNE_S=330 TUNE1="--family ws90 --head-dim 64,96 --dtype bf16,fp16 --seqlen 512,1024,2048,4096,8192,16384" \
    AFTER=build-gpu8/after1.sh bash scripts/gpu_call.sh;;
*)
  echo "not an H200: nothing run";;
esac
