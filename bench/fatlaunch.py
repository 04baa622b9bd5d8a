# SPDX-License-Identifier: MIT
"""Launch fatune's compiled forward kernels on PyTorch tensors, through the
CUDA driver API (ctypes over libcuda), so that benchmark scripts can time the
stored winners beside scaled_dot_product_attention in one process.

The parameter block mirrors templates/fat_abi.h field for field; the launch
geometry follows the contract every forward variant keeps: grid
(ceil(seqlen_q / block_m), heads, batch), `threads` threads, `smem_bytes` of
dynamic shared memory.
"""
import ctypes
import math

import torch

LOG2E = 1.4426950408889634
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class FwdParams(ctypes.Structure):
    """templates/fat_abi.h: struct fat_fwd_params."""
    _fields_ = [
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p),
        ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
        ("seqused_k", ctypes.c_void_p), ("o_accum", ctypes.c_void_p), ("lse_accum", ctypes.c_void_p),
    ] + [(f"{t}_{s}_stride", ctypes.c_longlong) for t in "qkvo" for s in ("batch", "row", "head")] + [
        ("batch", ctypes.c_int), ("heads", ctypes.c_int), ("heads_k", ctypes.c_int),
        ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int), ("head_dim", ctypes.c_int),
        ("window_left", ctypes.c_int), ("window_right", ctypes.c_int),
        ("softmax_scale", ctypes.c_float), ("scale_log2", ctypes.c_float),
        ("softcap_in", ctypes.c_float), ("softcap_out", ctypes.c_float),
    ]


assert ctypes.sizeof(FwdParams) == 224, "fat_fwd_params layout changed: update fatlaunch.py"

_cuda = None


def _driver():
    global _cuda
    if _cuda is None:
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # makes the primary context current
        _cuda = ctypes.CDLL("libcuda.so.1")
    return _cuda


def _check(rc, what):
    if rc != 0:
        msg = ctypes.c_char_p()
        _driver().cuGetErrorString(rc, ctypes.byref(msg))
        raise RuntimeError(f"{what}: CUDA error {rc}: {msg.value.decode() if msg.value else '?'}")


class Kernel:
    """One compiled variant: its cubin loaded as a module, ready to launch."""

    def __init__(self, cubin: bytes, entry: str, block_m: int, threads: int, smem_bytes: int, name=""):
        cu = _driver()
        self.name, self.block_m, self.threads, self.smem = name, block_m, threads, smem_bytes
        self._image = ctypes.create_string_buffer(cubin, len(cubin))
        self.module = ctypes.c_void_p()
        _check(cu.cuModuleLoadData(ctypes.byref(self.module), self._image), f"load {name}")
        self.fn = ctypes.c_void_p()
        _check(cu.cuModuleGetFunction(ctypes.byref(self.fn), self.module, entry.encode()), f"get {entry}")
        _check(cu.cuFuncSetAttribute(self.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     ctypes.c_int(smem_bytes)), f"smem {smem_bytes}")

    def params(self, q, k, v, o, lse, scale=None):
        b, sq, h, d = q.shape
        _, sk, hk, _ = k.shape
        scale = 1.0 / math.sqrt(d) if scale is None else scale
        for t in (q, k, v, o):
            assert t.stride(-1) == 1 and t.is_cuda
        p = FwdParams(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                      lse=lse.data_ptr(), batch=b, heads=h, heads_k=hk, seqlen_q=sq, seqlen_k=sk,
                      head_dim=d, window_left=-1, window_right=-1, softmax_scale=scale,
                      scale_log2=scale * LOG2E)
        for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
            for i, s in enumerate(("batch", "row", "head")):
                setattr(p, f"{name}_{s}_stride", t.stride(i))
        return p

    def launch(self, p: FwdParams, stream=None):
        stream = torch.cuda.current_stream().cuda_stream if stream is None else stream
        args = (ctypes.c_void_p * 1)(ctypes.addressof(p))
        grid_x = (p.seqlen_q + self.block_m - 1) // self.block_m
        _check(_driver().cuLaunchKernel(self.fn, grid_x, p.heads, p.batch, self.threads, 1, 1,
                                        self.smem, ctypes.c_void_p(stream), args, None),
               f"launch {self.name}")

    def __call__(self, q, k, v, scale=None):
        b, sq, h, d = q.shape
        o = torch.empty_like(q)
        lse = torch.empty((b, h, sq), device=q.device, dtype=torch.float32)
        self.launch(self.params(q, k, v, o, lse, scale))
        return o, lse


def reference(q, k, v, causal, scale=None):
    """float64 attention in the (batch, seqlen, heads, head_dim) layout, with
    fatune's conventions: causal bottom-right aligned, rows with no visible key
    give O = 0 and lse = -inf."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qd, kd, vd = (x.double().transpose(1, 2) for x in (q, k, v))
    if hk != h:
        kd = kd.repeat_interleave(h // hk, dim=1)
        vd = vd.repeat_interleave(h // hk, dim=1)
    s = torch.matmul(qd, kd.transpose(-1, -2)) * scale
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + (sk - sq), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None].masked_fill(torch.isinf(lse[..., None]), 0.0))
    p = torch.nan_to_num(p, nan=0.0)
    o = torch.matmul(p, vd).transpose(1, 2)
    return o, lse
