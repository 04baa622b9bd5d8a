#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One backward pass (or forward, --direction fwd) of fatune.attention and
one of a PyTorch SDPA backend (--peer flash: FlashAttention-2, the default;
cudnn: cuDNN) on the same tensors, for Nsight Compute to profile side by side:

    ncu --kernel-name regex:'fat_bwd_mma80|flash_bwd_dq_dk_dv' --launch-count 2 \\
        --section WarpStateStats --section SchedulerStats ... \\
        python3 bench/profile_bwd.py --head-dim 128 --seqlen 4096

(`PROFILE=1 scripts/gpu_run.sh` does this and prints bench/ncu_stalls.py's
table of the two kernels' stall reasons.)

Each library runs a forward (outside the kernels ncu selects) and then one
backward (--deterministic: fatune a second, deterministic=True, after the
default one); nothing is timed here: ncu measures. The shape is FlashAttention's
benchmark shape at --seqlen (batch x seqlen = 16384 tokens, heads x head dim
= 2048), bf16.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--direction", choices=("fwd", "bwd"), default="bwd")
    ap.add_argument("--peer", choices=("flash", "cudnn"), default="flash")
    ap.add_argument("--deterministic", action="store_true",
                    help="fatune's backward with deterministic=True (its deterministic pick) after the default one")
    args = ap.parse_args()

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import fatune

    d, s = args.head_dim, args.seqlen
    b, h = max(1, 16384 // s), 2048 // d
    torch.manual_seed(0)
    # SDPA's layout (batch, heads, seqlen, head dim); fatune's (batch, seqlen, heads, head dim).
    q, k, v, dout = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    leaf = [t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v)]
    backward = args.direction == "bwd"
    for deterministic in (False, True) if args.deterministic else (False,):
        o = fatune.attention(*leaf, causal=args.causal, deterministic=deterministic)
        if backward:
            torch.autograd.grad(o, leaf, dout.transpose(1, 2).contiguous())
        torch.cuda.synchronize()
        print(f"fatune{' deterministic' if deterministic else ''}: {fatune.last_choice()}")

    backend = SDPBackend.FLASH_ATTENTION if args.peer == "flash" else SDPBackend.CUDNN_ATTENTION
    leaf = [t.clone().requires_grad_(backward) for t in (q, k, v)]
    with sdpa_kernel([backend]):
        o = torch.nn.functional.scaled_dot_product_attention(*leaf, is_causal=args.causal)
        if backward:
            torch.autograd.grad(o, leaf, dout)
    torch.cuda.synchronize()
    print(f"profiled {args.direction} bf16 d{d} s{s} b{b} h{h} {'causal' if args.causal else 'none'}: "
          f"fatune, then {backend.name}")


if __name__ == "__main__":
    main()
