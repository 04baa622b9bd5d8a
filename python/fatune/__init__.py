# SPDX-License-Identifier: MIT
"""fatune for PyTorch: the tuned FlashAttention of libfatune on CUDA tensors,
forward and backward.

A ctypes binding with no build step of its own, its calls torch.library
operators (fatune::fwd, fatune::bwd, fatune::fwd_varlen: _ops.py), so that
torch.compile(fullgraph=True) and torch.export trace them, fake and meta
tensors give their shapes, and CUDA graphs capture them:

    import fatune
    o = fatune.attention(q, k, v, causal=True)   # (batch, seqlen, heads, head_dim)
    o.sum().backward()                            # q.grad, k.grad, v.grad by libfatune
    fatune.last_choice()                          # which variant ran, and why

attention(q, k, v, *, causal=False, softmax_scale=None, window_size=(-1, -1),
          softcap=0.0, deterministic=False, return_softmax_lse=False,
          dropout_p=0.0, alibi_slopes=None, return_attn_probs=False)
    flash_attn_func's arguments with FlashAttention's meaning, every one
    after q, k, v by keyword only (a positional port of flash_attn_func,
    whose fourth argument is dropout_p, fails with TypeError rather than
    setting something else).
    q (batch, seqlen_q, heads, head_dim), k and v (batch, seqlen_k, heads_k,
    head_dim) with heads_k dividing heads (grouped-query), fp16 or bf16;
    head_dim any multiple of 8 up to 256 (those without a template of their
    own run on the next one up, padded inside the kernel, never copied).
    causal: bottom-right aligned (query i sees key j iff j <= i + seqlen_k -
    seqlen_q). softmax_scale multiplies q·kᵀ, None for 1/sqrt(head_dim)
    (scale= is the same argument by SDPA's name; giving both is a TypeError).
    window_size (left, right): FlashAttention's sliding window, query i sees
    keys i + seqlen_k - seqlen_q - left .. i + seqlen_k - seqlen_q + right,
    -1 for no bound on that side; causal=True sets right to 0. (-1, -1) is no
    window; (-1, 0) is the causal mask itself, and runs its kernels.
    softcap > 0: scores are soft-capped, softcap · tanh(score / softcap),
    score the scaled q·kᵀ (Gemma 2); its backward runs on libfatune's mma80f
    family (mma80's kernels with the soft-cap and variable lengths), not yet
    the Hopper families: slower than a backward without a cap.
    deterministic: the backward uses only variants that sum dQ in a fixed
    order, so the gradients are bit-identical from run to run (slower); it
    does not change the forward. return_softmax_lse=True returns (out, lse),
    lse the fp32 log-sum-exp (batch, heads, seqlen_q), carrying no gradient.
    q_descale, k_descale, v_descale: with torch.float8_e4m3fn q, k and v
    (FlashAttention-3's fp8 forward), their fp32 descale factors, () or
    (1,) or (batch, heads_k), None for 1; out is bf16; forward only, on
    Hopper. An fp8 K/V cache: fp16 or bf16 q with torch.float8_e4m3fn k and
    v, k_descale and v_descale as above (q_descale None), out in q's type;
    forward only, compute capability 8.9 or newer. dropout_p
    other than 0, alibi_slopes and return_attn_probs=True are what fatune
    has not: each a ValueError naming it, never ignored. Differentiable in q, k and v (torch.autograd): the backward
    recomputes the probabilities from q, k and the forward's log-sum-exp, so
    it keeps O(seqlen) memory, plus a device workspace of about 4 * batch *
    heads * seqlen_q * (1 + head_dim) bytes from the torch caching allocator
    while it runs. Not twice differentiable. The forward, too, takes a
    device workspace from the caching allocator when the variant it launches
    needs one (split-KV decoding: few queries, many keys; 256 bytes for a
    Hopper variant whose blocks draw masked query blocks from a counter).
attention_with_lse(q, k, v, **options)  attention(..., return_softmax_lse=True).
attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                 max_seqlen_k, *, seqused_k=None, **attention's options)
    flash_attn_varlen_func's packed batch, every argument after the seven
    by keyword only: q (total_q, heads, head_dim), k
    and v (total_k, heads_k, head_dim), sequence b's rows cu_seqlens_q[b] ..
    cu_seqlens_q[b+1]-1 of q (cu_seqlens_k likewise of k and v): int32 CUDA
    tensors of batch + 1 entries from 0, ascending; max_seqlen_* the longest
    sequence. seqused_k (int32, batch entries) limits sequence b to its first
    seqused_k[b] keys. Masks align each sequence bottom-right on its own
    lengths. Returns out (total_q, heads, head_dim), or (out, lse) with
    return_softmax_lse=True, lse (heads, total_q). The offsets are not read
    on the host (no synchronisation): their values are the caller's promise.
    Differentiable in q, k and v (fatune::bwd_varlen, on the mma80f family);
    a key past seqused_k gets zero gradients.
attention_varlen_with_lse(...)  attention_varlen(..., return_softmax_lse=True).
attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens=None,
                       block_table=None, causal=False, softmax_scale=None,
                       window_size=(-1, -1), softcap=0.0, return_softmax_lse=False,
                       k_descale=None, v_descale=None)
    flash_attn_with_kvcache's decoding and chunked-prefill call, inference
    only: q (batch, seqlen_q, heads, head_dim) against a K/V cache, either
    contiguous, k_cache and v_cache (batch, seqlen_cache, heads_k,
    head_dim), or paged: k_cache and v_cache (num_blocks, page_block_size,
    heads_k, head_dim), a pool of pages, with block_table int32 (batch,
    max_blocks_per_seq) naming sequence b's pages in order (page_block_size
    a power of two from 16: vLLM's 16 up to FlashAttention-2's 256 and
    beyond). cache_seqlens (an int, or int32 (batch,)) is each sequence's
    cache length, None for the whole cache (seqlen_cache, or max_blocks x
    page_block_size); causal and windows align bottom-right on it. k and v
    (appending new keys to the cache) are not supported yet: a ValueError,
    as are the table's and lengths' values (device data, not read on the
    host: the caller's promise). Returns out, or (out, lse). A paged cache
    runs on libfatune's paged family (fatune --paged tunes it). The
    operator fatune::fwd_kvcache. An fp8 cache: k_cache and v_cache
    torch.float8_e4m3fn under an fp16 or bf16 q, k_descale and v_descale
    their fp32 factors (FlashAttention-3's: (), (1,) or (batch, heads_k),
    None for 1), out in q's type; compute capability 8.9 or newer; the
    operator fatune::fwd_kvcache_fp8.
attention_bwd(dout, q, k, v, o, lse, *, causal, softmax_scale, window_size,
              softcap, deterministic, dq, dk, dv)  the backward itself: (dq, dk, dv),
    into given tensors if dq, dk, dv are passed (dk, dv have heads_k heads).
select(q, k, v, *, ...), select_bwd(q, k, v, *, ...)  the Choice a launch
    would make.

Launches go to the current torch stream of the tensors' device (in backward,
the stream autograd runs it on); nothing is synchronised or read back from
the device, and every workspace comes from torch's caching allocator, so a
CUDA graph captures forward, backward and decoding (warm a shape up before
capturing it: its first call opens a context and loads a module). The
library is found at $FATUNE_LIB, else inside the package (lib/libfatune.so,
where a wheel puts it), else ../build/runtime/libfatune.so relative to this
package (a source checkout), else by the system loader (an install). One
libfatune context is opened per CUDA device on first use. Importing the
package needs neither PyTorch nor libfatune (it registers its operators when
PyTorch is there); the first call needs both.
"""
import math

from . import _abi, _runtime
from ._runtime import Choice, FatuneError

try:
    import torch
except ImportError:  # the package imports without PyTorch; its calls need it
    torch = None
else:
    from . import _ops  # registers fatune::fwd, fatune::bwd, ...; its eager path (_ops.forward, ...)

__all__ = ["attention", "attention_with_lse", "attention_varlen", "attention_varlen_with_lse",
           "attention_with_kvcache", "attention_bwd", "last_choice", "select", "select_bwd", "Choice",
           "FatuneError"]

_MASK_NONE, _MASK_CAUSAL = _abi.MASK["FAT_ATTN_MASK_NONE"], _abi.MASK["FAT_ATTN_MASK_CAUSAL"]
_MASK_LOCAL = _abi.MASK["FAT_ATTN_MASK_LOCAL"]
_INT_MAX = 2**31 - 1         # the C API's int fields

# What follows runs in the caller's frame, which torch.compile traces: plain
# functions over Python scalars and type checks, no ctypes, no data pointer.


def _need_torch(api):
    if torch is None:
        raise ModuleNotFoundError(f"{api} needs PyTorch (import torch failed)")


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _check_bool(name, x):
    if not isinstance(x, bool):
        raise TypeError(f"{name} must be a bool, got {x!r}")


def _check_tensors(**tensors):
    """TypeError for an argument that is no tensor (before the operator's
    dispatcher, whose message would not name the function)."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


def _options(causal, scale, window_size, softcap, scale_name="softmax_scale"):
    """(mask, window_left, window_right, softmax_scale, softcap) of a call,
    checked, in fat_attn_args' terms: mask one of FAT_ATTN_MASK_*, the window
    (-1, -1) unless local, softmax_scale 0.0 for 1/sqrt(head_dim)."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise TypeError(f"{scale_name} must be a float or None, got {type(scale).__name__}")
    if scale is not None and not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"{scale_name} {scale} must be positive and finite")
    if (not isinstance(window_size, (tuple, list)) or len(window_size) != 2
            or not all(_is_int(x) for x in window_size)):
        raise TypeError(f"window_size must be a pair of ints (left, right), got {window_size!r}")
    for side, x in zip(("left", "right"), window_size):
        if not -1 <= x <= _INT_MAX:
            raise ValueError(f"window_size {tuple(window_size)}: {side} bound {x} must be -1 "
                             f"(unbounded) or 0 .. {_INT_MAX}")
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"softcap must be a float, got {type(softcap).__name__}")
    if not (softcap >= 0 and math.isfinite(softcap)):
        raise ValueError(f"softcap {softcap} must be 0 (no cap) or positive and finite")
    left, right = window_size
    if causal:
        right = 0  # FlashAttention's convention: causal bounds the window's right side
    if (left, right) == (-1, -1):
        mask = _MASK_NONE
    elif (left, right) == (-1, 0):
        mask = _MASK_CAUSAL  # the same mask, served by the causal kernels
    else:
        mask = _MASK_LOCAL
    if mask != _MASK_LOCAL:
        left, right = -1, -1
    return mask, left, right, 0.0 if scale is None else float(scale), float(softcap)


def _scale_arg(api, softmax_scale, scale):
    """(value, name) of the scale a call gave: FlashAttention's softmax_scale,
    or scale (SDPA's name, and this binding's before 0.3), never both."""
    if scale is None:
        return softmax_scale, "softmax_scale"
    if softmax_scale is not None:
        raise TypeError(f"{api}: softmax_scale={softmax_scale!r} and scale={scale!r} both given; they "
                        "are one argument (softmax_scale, FlashAttention's name; scale, SDPA's)")
    return scale, "scale"


# _flash_options' accepted calls by their arguments and the arguments' types
# (1 == 1.0 == True: a bool's place must not take an equal int); bounded.
_FLASH_OPTIONS_KEPT = 256
_flash_options_kept = {}


def _flash_options(api, causal, softmax_scale, scale, window_size, softcap, deterministic, dropout_p,
                   alibi_slopes, return_attn_probs, return_softmax_lse):
    """_options of a call in FlashAttention's terms, after the refusals of
    what FlashAttention takes and fatune has not: dropout_p other than 0, ALiBi
    slopes, the attention probabilities. Each refusal names the value. A
    call whose arguments (and their types) were accepted before returns what
    they gave then."""
    key = None
    if alibi_slopes is None and type(window_size) is tuple and len(window_size) == 2:
        # Spelled out rather than mapped: this runs on every call.
        key = (causal, softmax_scale, scale, window_size, softcap, deterministic, dropout_p, return_attn_probs,
               return_softmax_lse, type(causal), type(softmax_scale), type(scale), type(softcap),
               type(deterministic), type(dropout_p), type(return_attn_probs), type(return_softmax_lse),
               type(window_size[0]), type(window_size[1]))
        try:
            kept = _flash_options_kept.get(key)
        except TypeError:  # an unhashable argument: refused below by name
            kept = key = None
        if kept is not None:
            return kept
    options = _check_flash_options(api, causal, softmax_scale, scale, window_size, softcap, deterministic,
                                   dropout_p, alibi_slopes, return_attn_probs, return_softmax_lse)
    if key is not None:
        if len(_flash_options_kept) >= _FLASH_OPTIONS_KEPT:
            _flash_options_kept.clear()
        _flash_options_kept[key] = options
    return options


def _check_flash_options(api, causal, softmax_scale, scale, window_size, softcap, deterministic, dropout_p,
                         alibi_slopes, return_attn_probs, return_softmax_lse):
    """_flash_options without the memo."""
    _check_bool("deterministic", deterministic)
    _check_bool("return_softmax_lse", return_softmax_lse)
    _check_bool("return_attn_probs", return_attn_probs)
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"dropout_p must be a float, got {type(dropout_p).__name__}")
    if dropout_p != 0:
        raise ValueError(f"{api}: dropout_p {dropout_p}: fatune has no attention dropout; dropout_p "
                         "must be 0.0")
    if alibi_slopes is not None:
        raise ValueError(f"{api}: alibi_slopes {type(alibi_slopes).__name__}: fatune has no ALiBi; "
                         "alibi_slopes must be None")
    if return_attn_probs:
        raise ValueError(f"{api}: return_attn_probs True: fatune never forms the attention "
                         "probabilities; return_softmax_lse=True returns the log-sum-exp")
    value, name = _scale_arg(api, softmax_scale, scale)
    return _options(causal, value, window_size, softcap, name)


def attention_with_lse(q, k, v, **options):
    """attention(q, k, v, return_softmax_lse=True, **options): (out, lse),
    lse the fp32 log-sum-exp (batch, heads, seqlen_q), natural log, -inf for
    a row that sees no key. Both are differentiable (16-bit inputs): a loss
    through lse gets its gradient (the backward's D = rowsum(dO ∘ O) − dlse);
    the fp8 forward's lse is not."""
    return attention(q, k, v, return_softmax_lse=True, **options)


def attention(q, k, v, *, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
              deterministic=False, return_softmax_lse=False, dropout_p=0.0, alibi_slopes=None,
              return_attn_probs=False, scale=None, q_descale=None, k_descale=None, v_descale=None):
    """softmax(softmax_scale · q·kᵀ [soft-capped] [causal or window mask]) · v
    for CUDA tensors in PyTorch's (batch, seqlen, heads, head_dim) layout,
    fp16 or bf16, head_dim a multiple of 8 up to 256: flash_attn_func's
    arguments, each after q, k, v by keyword only. softmax_scale defaults to
    1/sqrt(head_dim) (scale= is the same argument by SDPA's name); causal
    and window_size (left, right; -1 unbounded) are bottom-right aligned,
    causal=True making the right bound 0. k and v may have fewer heads
    (grouped-query). Differentiable in q, k and v (with softcap > 0 too);
    deterministic=True makes the backward bit-reproducible. Returns out, or (out, lse) with
    return_softmax_lse=True. dropout_p must be 0, alibi_slopes None and
    return_attn_probs False: fatune has none of them, and refuses rather
    than ignores them. Raises ValueError for a wrong dtype, device, shape,
    window or a non-contiguous last dimension, TypeError for a value of the
    wrong kind. The operator fatune::fwd (its backward fatune::bwd).

    fp8: q, k and v torch.float8_e4m3fn (all three), each value standing for
    itself times its descale factor: q_descale, k_descale, v_descale
    (FlashAttention-3's flash_attn_func arguments), fp32 tensors on the
    inputs' device of shape () or (1,) (one factor per tensor) or (batch,
    heads_k), None for 1. Returns out in bf16 (and lse fp32). Forward only,
    on Hopper (compute capability 9.0): the operator fatune::fwd_fp8, whose
    backward raises (no fp8 backward yet). Descale factors with fp16 or bf16
    inputs are a ValueError naming them.

    An fp8 K/V cache: q fp16 or bf16 with k and v torch.float8_e4m3fn,
    k_descale and v_descale as above and q_descale None (q is not fp8).
    Returns out in q's type. Forward only, compute capability 8.9 or newer,
    served by libfatune's decoding families (splitkv): the same operator
    fatune::fwd_fp8. Any other mix of fp8 and 16-bit inputs is a ValueError
    naming the dtypes."""
    api = "fatune.attention"
    options = _flash_options(api, causal, softmax_scale, scale, window_size, softcap, deterministic,
                             dropout_p, alibi_slopes, return_attn_probs, return_softmax_lse)
    _need_torch(api)
    _check_tensors(q=q, k=k, v=v)
    descales = (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))
    # None, "all" (e4m3 q, k, v) or "kv" (an fp8 K/V cache); any other mix refused by name.
    fp8 = _runtime.fp8_kind(q, k, v, api)
    if fp8:
        _check_descales(descales)
        if fp8 == "kv":
            _runtime.check_q_descale(q, q_descale, api)
        o, lse = _ops.forward_fp8(q, k, v, q_descale, k_descale, v_descale, *options)
        return (o, lse) if return_softmax_lse else o
    given = [name for name, d in descales if d is not None]
    if given:
        raise ValueError(f"{api}: {', '.join(given)} given with {q.dtype} q, k and v: descale factors "
                         "are for torch.float8_e4m3fn inputs; pass None")
    o, lse = _ops.forward(q, k, v, *options, deterministic)
    return (o, lse) if return_softmax_lse else o


def _check_descales(descales):
    """TypeError for a descale factor that is neither a tensor nor None."""
    for name, d in descales:
        if d is not None and not isinstance(d, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor or None, got {type(d).__name__}")


def attention_varlen_with_lse(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **options):
    """attention_varlen(..., return_softmax_lse=True, **options): (out, lse),
    lse the fp32 log-sum-exp (heads, total_q), natural log, -inf for a row
    that sees no key."""
    return attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            return_softmax_lse=True, **options)


def _is_length(x):
    """An int, or the symbolic int torch.compile passes for one under dynamic shapes."""
    return _is_int(x) or (torch is not None and isinstance(x, torch.SymInt))


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, seqused_k=None,
                     causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
                     deterministic=False, return_softmax_lse=False, dropout_p=0.0, alibi_slopes=None,
                     return_attn_probs=False, scale=None):
    """flash_attn_varlen_func on libfatune: attention over a batch of
    sequences of different lengths packed along the first dimension. q
    (total_q, heads, head_dim), k and v (total_k, heads_k, head_dim), fp16 or
    bf16; cu_seqlens_q and cu_seqlens_k contiguous int32 CUDA tensors of
    batch + 1 offsets (0 first, ascending, the last the tensor's rows);
    max_seqlen_q and max_seqlen_k the longest sequences (they size the
    launch: a longer sequence is not computed whole). Every argument after
    those seven is keyword-only, so that flash_attn_varlen_func's positional
    dropout_p cannot land anywhere. seqused_k, int32 of batch entries, limits
    sequence b to its first seqused_k[b] keys. The options are attention()'s,
    each sequence's mask aligned bottom-right on its own lengths (and
    deterministic, a backward's, changes nothing here). Returns out
    (total_q, heads, head_dim), or (out, lse) with return_softmax_lse=True.
    Differentiable in q, k and v: the operator fatune::fwd_varlen, its
    backward fatune::bwd_varlen."""
    api = "fatune.attention_varlen"
    options = _flash_options(api, causal, softmax_scale, scale, window_size, softcap, deterministic,
                             dropout_p, alibi_slopes, return_attn_probs, return_softmax_lse)
    _need_torch(api)
    _check_tensors(q=q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
    if seqused_k is not None:
        _check_tensors(seqused_k=seqused_k)
    for name, x in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if not _is_length(x):
            raise TypeError(f"{name} must be an int, got {type(x).__name__}")
    o, lse = _ops.forward_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                                 *options, deterministic)
    return (o, lse) if return_softmax_lse else o


def attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens=None, block_table=None,
                           causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
                           return_softmax_lse=False, rotary_cos=None, rotary_sin=None, cache_batch_idx=None,
                           cache_leftpad=None, alibi_slopes=None, num_splits=0, scale=None, q_descale=None,
                           k_descale=None, v_descale=None):
    """flash_attn_with_kvcache on libfatune: attention of q (batch, seqlen_q,
    heads, head_dim) over a K/V cache, contiguous (k_cache, v_cache: (batch,
    seqlen_cache, heads_k, head_dim)) or paged (k_cache, v_cache:
    (num_blocks, page_block_size, heads_k, head_dim); block_table: int32
    (batch, max_blocks_per_seq) of block indices, its last dimension
    contiguous). cache_seqlens: an int or an int32 CUDA tensor (batch,), the
    keys of each sequence's cache (None: all). The options are
    flash_attn_with_kvcache's (causal and window_size bottom-right aligned on
    each sequence's cache length), every one after v by keyword only. k and v
    (new keys to append), rotary embeddings, cache_batch_idx, cache_leftpad
    and alibi_slopes are what fatune has not: each a ValueError naming it;
    num_splits is chosen by the launch for the GPU (0 only). Returns out
    (batch, seqlen_q, heads, head_dim), or (out, lse) with
    return_softmax_lse=True, lse (batch, heads, seqlen_q) fp32. Not
    differentiable (a cache is an inference's). The operator
    fatune::fwd_kvcache.

    An fp8 K/V cache: k_cache and v_cache torch.float8_e4m3fn (both) under
    an fp16 or bf16 q, each cached value standing for itself times its
    tensor's descale factor: k_descale and v_descale (FlashAttention-3's
    flash_attn_with_kvcache arguments), fp32 tensors on q's device of shape
    () or (1,) or (batch, heads_k), None for 1; q_descale must be None (q
    is not fp8). Returns out in q's type. Compute capability 8.9 or newer,
    contiguous (splitkv) or paged (the paged family). The operator
    fatune::fwd_kvcache_fp8. Descale factors with a 16-bit cache, an fp8 q,
    and fp8 formats other than E4M3FN are a ValueError naming them."""
    api = "fatune.attention_with_kvcache"
    for name, x in (("k", k), ("v", v), ("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin),
                    ("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad),
                    ("alibi_slopes", alibi_slopes)):
        if x is not None:
            raise ValueError(f"{api}: {name} {type(x).__name__}: fatune's KV-cache call has no {name}; "
                             f"{name} must be None")
    if not _is_int(num_splits) or num_splits != 0:
        raise ValueError(f"{api}: num_splits {num_splits!r}: the launch chooses the split count for the "
                         "GPU; num_splits must be 0")
    _check_bool("return_softmax_lse", return_softmax_lse)
    value, name = _scale_arg(api, softmax_scale, scale)
    options = _options(causal, value, window_size, softcap, name)
    _need_torch(api)
    _check_tensors(q=q, k_cache=k_cache, v_cache=v_cache)
    if block_table is not None:
        _check_tensors(block_table=block_table)
    if _is_length(cache_seqlens):
        if not 0 <= cache_seqlens <= _INT_MAX:
            raise ValueError(f"{api}: cache_seqlens {cache_seqlens} must be 0 .. {_INT_MAX}")
        cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    elif cache_seqlens is not None:
        _check_tensors(cache_seqlens=cache_seqlens)
    descales = (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))
    fp8 = _runtime.fp8_kind(q, k_cache, v_cache, api, ("q", "k_cache", "v_cache"))
    if fp8 == "all":
        raise ValueError(f"{api}: q is {q.dtype}: an fp8 K/V cache takes a torch.float16 or torch.bfloat16 "
                         "q (fp8 q, k and v are fatune.attention's e4m3 forward)")
    if fp8 == "kv":
        _check_descales(descales)
        _runtime.check_q_descale(q, q_descale, api)
        o, lse = _ops.forward_kvcache_fp8(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale,
                                          *options)
        return (o, lse) if return_softmax_lse else o
    given = [name for name, d in descales if d is not None]
    if given:
        raise ValueError(f"{api}: {', '.join(given)} given with a {k_cache.dtype} cache: descale factors "
                         "are for a torch.float8_e4m3fn cache; pass None")
    o, lse = _ops.forward_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, *options)
    return (o, lse) if return_softmax_lse else o


def attention_bwd(dout, q, k, v, o, lse, *, causal=False, softmax_scale=None, window_size=(-1, -1),
                  softcap=0.0, deterministic=False, dq=None, dk=None, dv=None, scale=None, dlse=None):
    """The gradients (dq, dk, dv) of attention(q, k, v, causal=causal,
    softmax_scale=softmax_scale, window_size=window_size) for the incoming
    gradient DOUT, given the forward's O and LSE (from attention_with_lse),
    by fat_attention_bwd on the current stream; every argument after lse by
    keyword only. dq has q's shape, dk and dv k's (heads_k heads: the
    gradients of a group's query heads are summed). DQ, DK, DV, when given,
    are written (every element) and returned; otherwise they are allocated in
    the layouts of q, k and v. DOUT is copied first when the kernels cannot
    read it where it lies. softcap: the forward's. DLSE: the gradient through
    lse (fp32 of lse's shape), or None. Without dq, dk, dv this is
    the operator fatune::bwd; with them
    (writing into given tensors) a plain call, which torch.compile does not
    trace."""
    api = "fatune.attention_bwd"
    _check_bool("deterministic", deterministic)
    value, name = _scale_arg(api, softmax_scale, scale)
    mask, left, right, value, cap = _options(causal, value, window_size, softcap, name)
    _need_torch(api)
    _check_tensors(dout=dout, q=q, k=k, v=v, o=o, lse=lse)
    # Under this function's name (the operator's own checks, which follow,
    # speak for the autograd backward: fatune.attention); no data pointer
    # read, so that torch.compile traces it.
    _runtime.check_bwd(dout, q, k, v, o, lse, api, storage=False)
    _runtime.check_dlse(dlse, lse, api)
    if dq is None and dk is None and dv is None:
        return _ops.backward(dout, q, k, v, o, lse, mask, left, right, value, cap, deterministic, dlse=dlse)
    for name, g, like, like_name in (("dq", dq, q, "q"), ("dk", dk, k, "k"), ("dv", dv, v, "v")):
        if g is not None:
            _runtime.check_like(name, g, like, like_name, api)
    return _runtime.backward(dout, q, k, v, o, lse, mask, left, right, value, cap, deterministic, dq, dk, dv,
                             api, dlse)


def select(q, k, v, *, causal=False, window_size=(-1, -1), softcap=0.0):
    """The Choice fatune's forward would make for these tensors, without launching."""
    mask, left, right, _, cap = _options(causal, None, window_size, softcap)
    _need_torch("fatune.select")
    return _runtime.select(q, k, v, mask, left, right, cap)


def select_bwd(q, k, v, *, causal=False, window_size=(-1, -1), softcap=0.0, deterministic=False):
    """The Choice fatune's backward would make for these tensors, without launching."""
    _check_bool("deterministic", deterministic)
    mask, left, right, _, cap = _options(causal, None, window_size, softcap)
    _need_torch("fatune.select_bwd")
    return _runtime.select(q, k, v, mask, left, right, cap, bwd=True, deterministic=deterministic)


def last_choice(device=None):
    """The Choice of the most recent launch on DEVICE (default: the current one),
    forward or backward."""
    _need_torch("fatune.last_choice")
    return _runtime.last_choice(torch.cuda.current_device() if device is None else device)
