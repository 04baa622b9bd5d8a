# s40's first call, whichever GPU comes: on an H200 issue 23's H200 cells
# (results/raw/s39/scripts/call1.sh's H200 branch), on an H100 this
# session's re-tune (call1.sh here).
#   carry ["build-gpu9"]
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
*H200*) bash results/raw/s39/scripts/call1.sh ;;
*) bash results/raw/s40/scripts/call1.sh ;;
esac
