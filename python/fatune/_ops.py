# SPDX-License-Identifier: MIT
"""fatune's torch.library operators: the forward, the backward and the
packed (variable-length) forward and backward, each a custom_op with a fake
implementation (shapes, dtypes and strides from the same functions the real
one allocates with, and the same checks but the data's alignment), and
autograd formulas for the two forwards.

So that torch.compile(fullgraph=True) and torch.export see one operator
where the binding used to build ctypes structs in Python (a graph break:
Dynamo cannot trace PyCStructType), everything that touches ctypes or a
data pointer runs inside the real implementations (_runtime.forward,
_runtime.backward, _runtime.forward_varlen, _runtime.backward_varlen). The
public functions in __init__.py check their options (Python scalars) and
call these.

    fatune::fwd(q, k, v, mask, window_left, window_right, softmax_scale,
                softcap, deterministic) -> (out, lse)
    fatune::bwd(dout, q, k, v, out, lse, mask, window_left, window_right,
                softmax_scale, softcap, deterministic) -> (dq, dk, dv)
    fatune::fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k,
                       max_seqlen_q, max_seqlen_k, mask, window_left,
                       window_right, softmax_scale, softcap, deterministic)
                       -> (out, lse)
    fatune::bwd_varlen(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
                       seqused_k, max_seqlen_q, max_seqlen_k, mask,
                       window_left, window_right, softmax_scale, softcap,
                       deterministic) -> (dq, dk, dv)
    fatune::fwd_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, mask,
                        window_left, window_right, softmax_scale, softcap)
                        -> (out, lse)          (inference: no autograd)
    fatune::fwd_fp8(q, k, v, q_descale, k_descale, v_descale, mask,
                    window_left, window_right, softmax_scale, softcap)
                    -> (out, lse)              (e4m3 q, k, v, out bf16; or an
                                                fp8 K/V cache: fp16/bf16 q, e4m3
                                                k and v, out q's type, no
                                                q_descale; its backward
                                                refuses: none yet)
    fatune::fwd_kvcache_fp8(q, k_cache, v_cache, cache_seqlens, block_table,
                            k_descale, v_descale, mask, window_left,
                            window_right, softmax_scale, softcap)
                            -> (out, lse)      (an fp8 K/V cache: e4m3 caches
                                                under an fp16/bf16 q, out q's
                                                type; inference: no autograd)

The options are fat_attn_args' own terms (_runtime's docstring); a
forward's deterministic is its backward's, which is why the forwards carry
it. A soft-capped or packed backward runs on libfatune's mma80f family (the
one with those features). None of them is twice differentiable.
"""
import warnings
from typing import Optional

import torch
from torch import Tensor

from . import _runtime
from . import native as _native

@torch.library.custom_op("fatune::fwd", mutates_args=())
def fwd(q: Tensor, k: Tensor, v: Tensor, mask: int, window_left: int, window_right: int, softmax_scale: float,
        softcap: float, deterministic: bool) -> tuple[Tensor, Tensor]:
    return _runtime.forward(q, k, v, mask, window_left, window_right, softmax_scale, softcap)


@fwd.register_fake
def _fwd_fake(q, k, v, mask, window_left, window_right, softmax_scale, softcap, deterministic):
    _runtime.check_qkv(q, k, v, storage=False)
    return _runtime.fwd_outputs(q)


@torch.library.custom_op("fatune::bwd", mutates_args=())
def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, mask: int, window_left: int,
        window_right: int, softmax_scale: float, softcap: float, deterministic: bool,
        dlse: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:
    return _runtime.backward(dout, q, k, v, out, lse, mask, window_left, window_right, softmax_scale, softcap,
                             deterministic, dlse=dlse)


@bwd.register_fake
def _bwd_fake(dout, q, k, v, out, lse, mask, window_left, window_right, softmax_scale, softcap, deterministic,
              dlse=None):
    _runtime.check_bwd(dout, q, k, v, out, lse, "fatune.attention", storage=False)
    _runtime.check_dlse(dlse, lse, "fatune.attention")
    return _runtime.bwd_outputs(q, k, v)


@torch.library.custom_op("fatune::fwd_varlen", mutates_args=())
def fwd_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
               seqused_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int, mask: int, window_left: int,
               window_right: int, softmax_scale: float, softcap: float,
               deterministic: bool) -> tuple[Tensor, Tensor]:
    return _runtime.forward_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                                   mask, window_left, window_right, softmax_scale, softcap)


@fwd_varlen.register_fake
def _fwd_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, mask,
                     window_left, window_right, softmax_scale, softcap, deterministic):
    _runtime.check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                          storage=False)
    return _runtime.varlen_outputs(q)


@torch.library.custom_op("fatune::bwd_varlen", mutates_args=())
def bwd_varlen(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, cu_seqlens_q: Tensor,
               cu_seqlens_k: Tensor, seqused_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int, mask: int,
               window_left: int, window_right: int, softmax_scale: float, softcap: float,
               deterministic: bool, dlse: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:
    return _runtime.backward_varlen(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k,
                                    max_seqlen_q, max_seqlen_k, mask, window_left, window_right, softmax_scale,
                                    softcap, deterministic, dlse)


@bwd_varlen.register_fake
def _bwd_varlen_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                     max_seqlen_k, mask, window_left, window_right, softmax_scale, softcap, deterministic,
                     dlse=None):
    _runtime.check_bwd_varlen(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                              max_seqlen_k, storage=False)
    _runtime.check_dlse(dlse, lse, "fatune.attention_varlen")
    return _runtime.bwd_outputs(q, k, v)


@torch.library.custom_op("fatune::fwd_kvcache", mutates_args=())
def fwd_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_seqlens: Optional[Tensor],
                block_table: Optional[Tensor], mask: int, window_left: int, window_right: int,
                softmax_scale: float, softcap: float) -> tuple[Tensor, Tensor]:
    return _runtime.forward_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, mask, window_left,
                                    window_right, softmax_scale, softcap)


@fwd_kvcache.register_fake
def _fwd_kvcache_fake(q, k_cache, v_cache, cache_seqlens, block_table, mask, window_left, window_right,
                      softmax_scale, softcap):
    _runtime.check_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, storage=False)
    return _runtime.fwd_outputs(q)


@torch.library.custom_op("fatune::fwd_fp8", mutates_args=())
def fwd_fp8(q: Tensor, k: Tensor, v: Tensor, q_descale: Optional[Tensor], k_descale: Optional[Tensor],
            v_descale: Optional[Tensor], mask: int, window_left: int, window_right: int, softmax_scale: float,
            softcap: float) -> tuple[Tensor, Tensor]:
    return _runtime.forward_fp8(q, k, v, q_descale, k_descale, v_descale, mask, window_left, window_right,
                                softmax_scale, softcap)


@fwd_fp8.register_fake
def _fwd_fp8_fake(q, k, v, q_descale, k_descale, v_descale, mask, window_left, window_right, softmax_scale,
                  softcap):
    _runtime.check_fp8(q, k, v, q_descale, k_descale, v_descale, storage=False)
    return _runtime.fwd_outputs(q)  # out bf16 for e4m3 q, else q's type


@torch.library.custom_op("fatune::fwd_kvcache_fp8", mutates_args=())
def fwd_kvcache_fp8(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_seqlens: Optional[Tensor],
                    block_table: Optional[Tensor], k_descale: Optional[Tensor], v_descale: Optional[Tensor],
                    mask: int, window_left: int, window_right: int, softmax_scale: float,
                    softcap: float) -> tuple[Tensor, Tensor]:
    return _runtime.forward_kvcache_fp8(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale,
                                        mask, window_left, window_right, softmax_scale, softcap)


@fwd_kvcache_fp8.register_fake
def _fwd_kvcache_fp8_fake(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, mask,
                          window_left, window_right, softmax_scale, softcap):
    _runtime.check_kvcache_fp8(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale,
                               storage=False)
    return _runtime.fwd_outputs(q)  # out in q's type


# ---- autograd -----------------------------------------------------------------------


def _grads_as_given(ctx):
    # An output the loss does not read reaches the backward as None: without
    # this autograd would allocate and zero a gradient for it (a kernel and
    # an allocation), for lse in nearly every backward.
    ctx.set_materialize_grads(False)


def _lse_not_differentiable(ctx, lse):
    # The fp8 forwards' lse (they have no backward at all).
    ctx.mark_non_differentiable(lse)
    _grads_as_given(ctx)


def _dout_of(dout, out):
    """dout, or zeros where only lse reached the loss (the kernels read dO;
    with dO = 0 the gradients come from dlse alone)."""
    return torch.zeros_like(out) if dout is None else dout


def _fwd_setup(ctx, inputs, output):
    q, k, v, mask, window_left, window_right, softmax_scale, softcap, deterministic = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.options = (mask, window_left, window_right, softmax_scale, softcap, deterministic)
    _grads_as_given(ctx)


def _fwd_backward(ctx, dout, dlse):
    nothing = (None,) * 6
    if dout is None and dlse is None:
        return (None, None, None) + nothing
    q, k, v, out, lse = ctx.saved_tensors
    return bwd(_dout_of(dout, out), q, k, v, out, lse, *ctx.options, dlse) + nothing


fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup)


def _varlen_setup(ctx, inputs, output):
    q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k = inputs[:6]
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k)
    ctx.options = inputs[6:]  # max_seqlen_q, max_seqlen_k, mask, windows, scale, softcap, deterministic
    _grads_as_given(ctx)


def _varlen_backward(ctx, dout, dlse):
    nothing = (None,) * 11
    if dout is None and dlse is None:
        return (None, None, None) + nothing
    saved = ctx.saved_tensors
    return bwd_varlen(_dout_of(dout, saved[3]), *saved, *ctx.options, dlse) + nothing


fwd_varlen.register_autograd(_varlen_backward, setup_context=_varlen_setup)


# The fp8 forwards (e4m3, issue 26; an fp8 K/V cache, issue 24) have no
# backward yet: a loss through their output is refused by name when
# autograd reaches it, never answered with zeros.
NO_FP8_BACKWARD = ("fatune.attention: the fp8 (torch.float8_e4m3fn) forward has no backward yet; "
                   "run it under torch.no_grad() or detach q, k and v, or use fp16/bf16 inputs for "
                   "training")


def _fp8_setup(ctx, inputs, output):
    _lse_not_differentiable(ctx, output[1])


def _fp8_backward(ctx, dout, _dlse):
    if dout is None:
        return (None,) * 11
    raise RuntimeError(NO_FP8_BACKWARD)


fwd_fp8.register_autograd(_fp8_backward, setup_context=_fp8_setup)


# ---- the eager path -------------------------------------------------------------------
#
# A torch.library.custom_op costs tens of microseconds of Python dispatch a
# call, and over a hundred with its autograd wrapper around an input that
# requires grad (against a few for a torch.autograd.Function: the
# thirty-fourth session's probe, results/raw/s34/scripts/hostprobe.py), which
# is most of a small decoding call's host time. Outside torch.compile and
# export, on plain tensors and with no torch-function or dispatch mode active
# (a mode may want to see the operator), the public functions call the same
# _runtime functions the operators run, directly, with the same autograd
# formulas in a torch.autograd.Function; everything else goes through the
# operators, so a traced program still holds fatune::fwd and fatune::bwd.


# Looked up once: eager() runs on every call (each attribute lookup is a
# dictionary's; torch.compile knows these functions by identity).
_is_compiling = torch.compiler.is_compiling
_is_tracing = torch._C._is_tracing
_function_mode = torch._C._is_torch_function_mode_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch_level = torch._C._functorch.peek_interpreter_stack


def eager(*tensors):
    """Whether a call on TENSORS (None allowed) may skip the operators: plain
    CUDA tensors (not fake, functional, meta or a subclass), nothing
    tracing (torch.compile, export, torch.jit.trace), no mode active, no
    torch.func transform (whose wrapped tensors are of type Tensor too)."""
    if _is_compiling() or _is_tracing() or _function_mode() or _dispatch_modes() or _functorch_level() is not None:
        return False
    for t in tensors:
        if t is not None and (type(t) is not Tensor or not t.is_cuda):
            return False
    return True


def _grad_needed(*tensors):
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


class _Fwd(torch.autograd.Function):
    """fatune::fwd with its autograd formula (_fwd_setup, _fwd_backward)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, window_left, window_right, softmax_scale, softcap, deterministic):
        out, lse = _runtime.forward(q, k, v, mask, window_left, window_right, softmax_scale, softcap)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (mask, window_left, window_right, softmax_scale, softcap, deterministic)
        _grads_as_given(ctx)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        nothing = (None,) * 6
        if dout is None and dlse is None:
            return (None, None, None) + nothing
        q, k, v, out, lse = ctx.saved_tensors
        return _runtime.backward(_dout_of(dout, out), q, k, v, out, lse, *ctx.options, dlse=dlse) + nothing


class _FwdVarlen(torch.autograd.Function):
    """fatune::fwd_varlen with its autograd formula (_varlen_setup, _varlen_backward)."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, *options):
        max_seqlen_q, max_seqlen_k, mask, window_left, window_right, softmax_scale, softcap, _det = options
        out, lse = _runtime.forward_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                                           max_seqlen_k, mask, window_left, window_right, softmax_scale,
                                           softcap)
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k)
        ctx.options = options
        _grads_as_given(ctx)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        nothing = (None,) * 11
        if dout is None and dlse is None:
            return (None, None, None) + nothing
        saved = ctx.saved_tensors
        return _runtime.backward_varlen(_dout_of(dout, saved[3]), *saved, *ctx.options, dlse) + nothing


def _load_native():
    """native.load(), or None with a warning saying why a built module
    could not be used."""
    try:
        return _native.load()
    except Exception as e:  # a broken build or compiler: the Python path serves
        warnings.warn(f"fatune: the native host path is not used: {type(e).__name__}: {e}", RuntimeWarning,
                      stacklevel=2)
        return None


# The native host path (fatune.native), where it is built: the dense forward
# and its autograd node, and the 16-bit KV-cache call, in C++, declining to
# the code below what it does not take.
native = _load_native()


def forward(q, k, v, mask, window_left, window_right, softmax_scale, softcap, deterministic):
    """(out, lse) as torch.ops.fatune.fwd gives them."""
    if not eager(q, k, v):
        return torch.ops.fatune.fwd(q, k, v, mask, window_left, window_right, softmax_scale, softcap,
                                    deterministic)
    if native is not None:
        r = native.fwd(q, k, v, mask, window_left, window_right, softmax_scale, softcap, deterministic)
        if r:
            return r[0], r[1]
    if _grad_needed(q, k, v):
        return _Fwd.apply(q, k, v, mask, window_left, window_right, softmax_scale, softcap, deterministic)
    return _runtime.forward(q, k, v, mask, window_left, window_right, softmax_scale, softcap)


def forward_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, *options):
    """(out, lse) as torch.ops.fatune.fwd_varlen gives them; OPTIONS are its
    max_seqlen_q, max_seqlen_k, mask, window_left, window_right,
    softmax_scale, softcap and deterministic."""
    if not eager(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k):
        return torch.ops.fatune.fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, *options)
    if _grad_needed(q, k, v):
        return _FwdVarlen.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, *options)
    return _runtime.forward_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, *options[:-1])


def backward(dout, q, k, v, out, lse, *options, dlse=None):
    """(dq, dk, dv) as torch.ops.fatune.bwd gives them."""
    if not eager(dout, q, k, v, out, lse, dlse):
        return torch.ops.fatune.bwd(dout, q, k, v, out, lse, *options, dlse)
    return _runtime.backward(dout, q, k, v, out, lse, *options, dlse=dlse)


# The inference-only operators (no autograd formula: fwd_kvcache,
# fwd_kvcache_fp8; fwd_fp8's backward refuses) go the eager way only where
# no input needs grad, so that a call that does meets the operator's own
# behaviour, as before.


def forward_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, *options):
    """(out, lse) as torch.ops.fatune.fwd_kvcache gives them; OPTIONS are its
    mask, window_left, window_right, softmax_scale and softcap."""
    if eager(q, k_cache, v_cache, cache_seqlens, block_table) and not _grad_needed(q, k_cache, v_cache):
        if native is not None:
            r = native.fwd_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, *options)
            if r:
                return r[0], r[1]
        return _runtime.forward_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, *options)
    return torch.ops.fatune.fwd_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, *options)


def forward_kvcache_fp8(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, *options):
    """(out, lse) as torch.ops.fatune.fwd_kvcache_fp8 gives them."""
    if (eager(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale)
            and not _grad_needed(q, k_cache, v_cache)):
        return _runtime.forward_kvcache_fp8(q, k_cache, v_cache, cache_seqlens, block_table, k_descale,
                                            v_descale, *options)
    return torch.ops.fatune.fwd_kvcache_fp8(q, k_cache, v_cache, cache_seqlens, block_table, k_descale,
                                            v_descale, *options)


def forward_fp8(q, k, v, q_descale, k_descale, v_descale, *options):
    """(out, lse) as torch.ops.fatune.fwd_fp8 gives them."""
    if eager(q, k, v, q_descale, k_descale, v_descale) and not _grad_needed(q, k, v):
        return _runtime.forward_fp8(q, k, v, q_descale, k_descale, v_descale, *options)
    return torch.ops.fatune.fwd_fp8(q, k, v, q_descale, k_descale, v_descale, *options)
