# SPDX-License-Identifier: MIT
"""fatune's torch.library operators: the forward, the backward and the
packed (variable-length) forward, each a custom_op with a fake
implementation (shapes, dtypes and strides from the same functions the real
one allocates with, and the same checks but the data's alignment), and
autograd formulas for the two forwards.

So that torch.compile(fullgraph=True) and torch.export see one operator
where the binding used to build ctypes structs in Python (a graph break:
Dynamo cannot trace PyCStructType), everything that touches ctypes or a
data pointer runs inside the real implementations (_runtime.forward,
_runtime.backward, _runtime.forward_varlen). The public functions in
__init__.py check their options (Python scalars) and call these.

    fatune::fwd(q, k, v, mask, window_left, window_right, softmax_scale,
                softcap, deterministic) -> (out, lse)
    fatune::bwd(dout, q, k, v, out, lse, mask, window_left, window_right,
                softmax_scale, deterministic) -> (dq, dk, dv)
    fatune::fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k,
                       max_seqlen_q, max_seqlen_k, mask, window_left,
                       window_right, softmax_scale, softcap) -> (out, lse)
    fatune::no_backward(dout, q, k, v, why) -> (dq, dk, dv)

The options are fat_attn_args' own terms (_runtime's docstring); fwd's
deterministic is its backward's, which is why the forward carries it.
no_backward stands where libfatune has no backward (a soft-cap, a packed
batch): traced like any operator, so a compiled model that is never
differentiated through it compiles, and it raises NotImplementedError,
naming why, when a backward runs it. None of them is twice differentiable.
"""
from typing import Optional

import torch
from torch import Tensor

from . import _runtime

SOFTCAP_NO_BACKWARD = ("fatune.attention: softcap {:g} has no backward (libfatune's fat_attention_bwd has "
                       "no soft-cap); train with softcap=0.0, or run the forward under torch.no_grad()")
VARLEN_NO_BACKWARD = ("fatune.attention_varlen has no backward (libfatune's fat_attention_bwd takes no "
                      "cu_seqlens); run it under torch.no_grad(), or use fatune.attention on padded tensors "
                      "to train")


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
        window_right: int, softmax_scale: float, deterministic: bool) -> tuple[Tensor, Tensor, Tensor]:
    return _runtime.backward(dout, q, k, v, out, lse, mask, window_left, window_right, softmax_scale,
                             deterministic)


@bwd.register_fake
def _bwd_fake(dout, q, k, v, out, lse, mask, window_left, window_right, softmax_scale, deterministic):
    _runtime.check_bwd(dout, q, k, v, out, lse, "fatune.attention", storage=False)
    return _runtime.bwd_outputs(q, k, v)


@torch.library.custom_op("fatune::fwd_varlen", mutates_args=())
def fwd_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
               seqused_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int, mask: int, window_left: int,
               window_right: int, softmax_scale: float, softcap: float) -> tuple[Tensor, Tensor]:
    return _runtime.forward_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                                   mask, window_left, window_right, softmax_scale, softcap)


@fwd_varlen.register_fake
def _fwd_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, mask,
                     window_left, window_right, softmax_scale, softcap):
    _runtime.check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                          storage=False)
    return _runtime.varlen_outputs(q)


@torch.library.custom_op("fatune::no_backward", mutates_args=())
def no_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, why: str) -> tuple[Tensor, Tensor, Tensor]:
    raise NotImplementedError(why)


@no_backward.register_fake
def _no_backward_fake(dout, q, k, v, why):
    return _runtime.bwd_outputs(q, k, v)


# ---- autograd -----------------------------------------------------------------------


def _lse_not_differentiable(ctx, lse):
    # lse gets no gradient: without set_materialize_grads(False) autograd
    # would allocate and zero one for every backward (a kernel and an
    # allocation), and a loss through lse alone reaches the backward as None.
    ctx.mark_non_differentiable(lse)
    ctx.set_materialize_grads(False)


def _fwd_setup(ctx, inputs, output):
    q, k, v, mask, window_left, window_right, softmax_scale, softcap, deterministic = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.options = (mask, window_left, window_right, softmax_scale, deterministic)
    ctx.softcap = softcap
    _lse_not_differentiable(ctx, lse)


def _fwd_backward(ctx, dout, _dlse):
    nothing = (None,) * 6
    if dout is None:  # only the non-differentiable lse reached the loss
        return (None, None, None) + nothing
    q, k, v, out, lse = ctx.saved_tensors
    if ctx.softcap:
        return no_backward(dout, q, k, v, SOFTCAP_NO_BACKWARD.format(ctx.softcap)) + nothing
    return bwd(dout, q, k, v, out, lse, *ctx.options) + nothing


fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup)


def _varlen_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:3])
    _lse_not_differentiable(ctx, output[1])


def _varlen_backward(ctx, dout, _dlse):
    nothing = (None,) * 10
    if dout is None:
        return (None, None, None) + nothing
    q, k, v = ctx.saved_tensors
    return no_backward(dout, q, k, v, VARLEN_NO_BACKWARD) + nothing


fwd_varlen.register_autograd(_varlen_backward, setup_context=_varlen_setup)
