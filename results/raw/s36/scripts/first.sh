# s36 first call (any GPU): s35's next1.sh (the binding's GPU tests over the
# CPU-only commits 5a7ddd2/7ee6c0a/47248df, hostparts2, bench_torch host);
# on an H200 then the forward ws90 d64/d96 re-tune waiting since the 32nd.
set -u
ROOT=$PWD
OUT0=${OUT:-$PWD/gpu-out}
OUT=$OUT0/n1 bash results/raw/s35/scripts/next1.sh
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
*H200*)
  PACK=build-gpu8/build-gpu OUT=$OUT0/t1 TUNE_S=220 \
    TUNE1="--family ws90 --head-dim 64,96 --dtype bf16,fp16 --seqlen 512,1024,2048,4096,8192,16384" \
    bash scripts/gpu_call.sh ;;
*) echo "not an H200: no re-tune" ;;
esac
cd "$OUT0" && tar czf n1.tgz n1 && rm -rf n1
