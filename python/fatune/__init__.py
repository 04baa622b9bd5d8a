# SPDX-License-Identifier: MIT
"""fatune for PyTorch: the tuned FlashAttention of libfatune on CUDA tensors,
forward and backward.

A thin ctypes binding, with no build step of its own:

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
    score the scaled q·kᵀ (Gemma 2). Forward only: the forward runs whatever
    requires grad, and it is the backward (loss.backward()) that raises
    NotImplementedError, since libfatune's backward has no soft-cap.
    deterministic: the backward uses only variants without atomics, so the
    gradients are bit-identical from run to run (slower); it does not change
    the forward. return_softmax_lse=True returns (out, lse), lse the fp32
    log-sum-exp (batch, heads, seqlen_q), carrying no gradient. dropout_p
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
    Forward only: the backward raises NotImplementedError.
attention_varlen_with_lse(...)  attention_varlen(..., return_softmax_lse=True).
attention_bwd(dout, q, k, v, o, lse, *, causal, softmax_scale, window_size,
              deterministic, dq, dk, dv)  the backward itself: (dq, dk, dv),
    into given tensors if dq, dk, dv are passed (dk, dv have heads_k heads).
select(q, k, v, *, ...), select_bwd(q, k, v, *, ...)  the Choice a launch
    would make.

Launches go to the current torch stream of the tensors' device (in backward,
the stream autograd runs it on). The library is found at $FATUNE_LIB, else
../build/runtime/libfatune.so relative to this package (a source checkout),
else by the system loader (an install). One libfatune context is opened per
CUDA device on first use. Importing the package needs neither PyTorch nor
libfatune; the first call needs both.
"""
import ctypes
import math
import os
import threading

from . import _abi

__all__ = ["attention", "attention_with_lse", "attention_varlen", "attention_varlen_with_lse",
           "attention_bwd", "last_choice", "select", "select_bwd", "Choice", "FatuneError"]

FAT_OK = _abi.STATUS["FAT_OK"]
_STATUS_NAMES = {v: k for k, v in _abi.STATUS.items()}
# The caller's problem: ValueError.
_CALLER_ERRORS = (_abi.STATUS["FAT_ERR_INVALID_ARGUMENT"], _abi.STATUS["FAT_ERR_UNSUPPORTED"])
_FP16, _BF16 = _abi.DTYPE["FAT_ATTN_FP16"], _abi.DTYPE["FAT_ATTN_BF16"]
_MASK_NONE, _MASK_CAUSAL = _abi.MASK["FAT_ATTN_MASK_NONE"], _abi.MASK["FAT_ATTN_MASK_CAUSAL"]
_MASK_LOCAL = _abi.MASK["FAT_ATTN_MASK_LOCAL"]
_ALIGN_BYTES = 16            # the kernels load 16 bytes at a time
_STRIDE_MULTIPLE = 8         # elements of a 16-byte load
_INT_MAX = 2**31 - 1         # the C API's int fields
_DENSE = "(batch, seqlen, heads, head_dim)"
_PACKED = "(total, heads, head_dim)"  # attention_varlen's q, k, v


class FatuneError(RuntimeError):
    """A libfatune call failed; .status is the fat_status name."""

    def __init__(self, status, message):
        self.status = _STATUS_NAMES.get(status, str(status))
        super().__init__(f"{self.status}: {message}")


class Choice:
    """The variant that served a problem: name, origin ('user database', 'shipped
    tables', 'built-in default'), match ('exact bucket', 'nearest bucket',
    'default'), bucket_seqlen, bucket_seqlen_k, bucket_group and bucket_window
    ((left, right) of a local mask, -1 unbounded; (0, 0) otherwise: the tuned
    problem's key), tuned_ms, load ('stored cubin', 'compiled with
    NVRTC'), db_path, note (why no stored cubin served, '' when one did)."""

    def __init__(self, lib, c):
        self.variant = c.variant.decode()
        self.source_hash = c.source_hash.decode()
        self.origin = lib.fat_origin_name(c.origin).decode()
        self.match = lib.fat_match_name(c.match).decode()
        self.bucket_seqlen = c.bucket_seqlen
        self.bucket_seqlen_k = c.bucket_seqlen_k
        self.bucket_group = c.bucket_group
        self.bucket_window = (c.bucket_window_left, c.bucket_window_right)
        self.tuned_ms = c.tuned_ms
        self.load = lib.fat_load_name(c.load).decode() if c.loaded else None
        self.db_path = c.db_path.decode()
        self.note = c.note.decode()

    def __repr__(self):
        return (f"Choice({self.variant}, {self.origin}, {self.match}, bucket {self.bucket_seqlen}, "
                f"load {self.load})")


def _library_path():
    env = os.environ.get("FATUNE_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    local = os.path.join(here, "..", "..", "build", "runtime", "libfatune.so")
    return local if os.path.exists(local) else _abi.SONAME


_lib = None
_contexts = {}
_lock = threading.Lock()


def _load():
    global _lib
    if _lib is not None:
        return _lib
    path = _library_path()
    lib = ctypes.CDLL(path)
    # The structs declared here are those of one release's header: a library
    # of another minor version refuses them (struct_size); say why up front.
    want = "%d.%d" % _abi.VERSION[:2]
    if not hasattr(lib, "fat_version_number"):
        raise OSError(f"{path} is a libfatune older than 0.3 (it has no fat_version_number); this "
                      f"binding is for libfatune {want} ({_abi.SONAME})")
    _abi.declare(lib)
    got = lib.fat_version_number()
    if got // 100 != _abi.VERSION[0] * 100 + _abi.VERSION[1]:
        raise OSError(f"{path} is libfatune {lib.fat_version_string().decode()}; this binding is for "
                      f"libfatune {want} ({_abi.SONAME}): point FATUNE_LIB at that library")
    _lib = lib
    return lib


def _context(device):
    """The libfatune context of DEVICE (an int), opened once per process."""
    with _lock:
        ctx = _contexts.get(device)
        if ctx is not None:
            return ctx
        lib = _load()
        ctx = ctypes.c_void_p()
        opts = _abi.fat_context_options(device=device)
        st = lib.fat_context_open(ctypes.byref(ctx), ctypes.byref(opts))
        if st != FAT_OK:
            msg = lib.fat_context_error(ctx).decode() if ctx.value else lib.fat_strerror(st).decode()
            lib.fat_context_close(ctx)
            raise FatuneError(st, msg)
        _contexts[device] = ctx
        return ctx


def _device(t):
    import torch
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


def _stream(device):
    """The current torch stream of DEVICE, as a CUstream."""
    import torch
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def _raise(lib, ctx, st, api):
    msg = lib.fat_context_error(ctx).decode()
    if st in _CALLER_ERRORS:
        raise ValueError(f"{api}: {msg}")
    raise FatuneError(st, msg)


def _check_tensor(name, t, api="fatune.attention", layout=_DENSE):
    """TypeError unless T is a tensor; ValueError unless it is an fp16/bf16
    CUDA tensor of LAYOUT's dimensions the kernels can read: head_dim a
    multiple of 8, last dimension contiguous, the others' strides multiples
    of 8 elements, data 16-byte aligned."""
    import torch
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_cuda:
        raise ValueError(f"{name} is on {t.device}; {api} needs CUDA tensors")
    ndim = layout.count(",") + 1
    if t.dim() != ndim:
        raise ValueError(f"{name} has {t.dim()} dimensions; expected {ndim}: {layout}")
    if t.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"{name} is {t.dtype}; {api} takes torch.float16 or torch.bfloat16")
    if 0 in t.shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}: every dimension must be >= 1")
    if t.shape[-1] % _STRIDE_MULTIPLE:
        raise ValueError(f"{name} has head_dim {t.shape[-1]}; {api} takes multiples of "
                         f"{_STRIDE_MULTIPLE} (the kernels load {_ALIGN_BYTES} bytes at a time)")
    if t.stride(-1) != 1:
        raise ValueError(f"{name} has stride {t.stride(-1)} in its last dimension; it must be "
                         "contiguous (stride 1)")
    if not _aligned(t):
        raise ValueError(f"{name} strides {tuple(t.stride())} must be multiples of "
                         f"{_STRIDE_MULTIPLE} and its data {_ALIGN_BYTES}-byte aligned")


def _aligned(t):
    return all(s % _STRIDE_MULTIPLE == 0 for s in t.stride()[:-1]) and t.data_ptr() % _ALIGN_BYTES == 0


def _kernel_layout(t):
    """T itself if the kernels can read it where it lies (as _check_tensor
    demands, and no element reachable by two indices, which libfatune refuses
    for every tensor), else a contiguous (batch, seqlen, heads, head_dim) copy
    in a fresh, hence aligned, allocation. For tensors the caller does not
    choose: the gradient autograd hands the backward may be expanded (stride
    0, from o.sum()) or a transpose."""
    import torch
    disjoint, span = True, 1  # span: elements inside the dimensions seen so far
    for st, n in sorted((st, n) for st, n in zip(t.stride(), t.shape) if n > 1):
        disjoint = disjoint and st >= span
        span = st * n
    if t.stride(-1) == 1 and _aligned(t) and disjoint:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


class _Options:
    """The mask, scale and soft-cap of a call, checked, in fat_attn_args'
    terms: mask one of FAT_ATTN_MASK_*, window_left/right -1 unless local."""

    def __init__(self, causal, scale, window_size=(-1, -1), softcap=0.0, scale_name="softmax_scale"):
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
            self.mask = _MASK_NONE
        elif (left, right) == (-1, 0):
            self.mask = _MASK_CAUSAL  # the same mask, served by the causal kernels
        else:
            self.mask = _MASK_LOCAL
        self.window = (left, right) if self.mask == _MASK_LOCAL else (-1, -1)
        self.scale = scale
        self.softcap = float(softcap)

    def fill(self, a):
        """Sets ARGS' (a fat_attn_args) mask, window, scale and soft-cap."""
        a.mask = self.mask
        a.window_left, a.window_right = self.window
        a.softmax_scale = 0.0 if self.scale is None else float(self.scale)
        a.softcap = self.softcap


def _scale_arg(api, softmax_scale, scale):
    """(value, name) of the scale a call gave: FlashAttention's softmax_scale,
    or scale (SDPA's name, and this binding's before 0.3), never both."""
    if scale is None:
        return softmax_scale, "softmax_scale"
    if softmax_scale is not None:
        raise TypeError(f"{api}: softmax_scale={softmax_scale!r} and scale={scale!r} both given; they "
                        "are one argument (softmax_scale, FlashAttention's name; scale, SDPA's)")
    return scale, "scale"


def _check_bool(name, x):
    if not isinstance(x, bool):
        raise TypeError(f"{name} must be a bool, got {x!r}")


def _flash_options(api, causal, softmax_scale, scale, window_size, softcap, deterministic, dropout_p,
                   alibi_slopes, return_attn_probs, return_softmax_lse):
    """The _Options of a call in FlashAttention's terms, after the refusals of
    what FlashAttention takes and fatune has not: dropout_p other than 0, ALiBi
    slopes, the attention probabilities. Each refusal names the value."""
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
    return _Options(causal, value, window_size, softcap, name)


def _check(q, k, v, api="fatune.attention", layout=_DENSE):
    """Python-side refusals of q, k and v, before libfatune's own
    (fat_attention_check): TypeError for a value of the wrong kind, ValueError
    for a wrong one. The options are _Options' to check."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t, api, layout)
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k and v must share a dtype: got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"q, k and v must be on one device: got {q.device}, {k.device}, {v.device}")
    if layout == _DENSE:
        b, d = q.shape[0], q.shape[3]
        if k.shape != v.shape or k.shape[0] != b or k.shape[3] != d:
            raise ValueError(f"shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: k and v "
                             "must match, with q's batch and head_dim")
    elif k.shape != v.shape or k.shape[2] != q.shape[2]:
        raise ValueError(f"shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: k and v "
                         "must match, with q's head_dim")
    h, hk = q.shape[-2], k.shape[-2]
    if h % hk:
        raise ValueError(f"k/v heads {hk} do not divide q heads {h}")


def _check_like(name, t, like, like_name, api):
    """T must be a tensor the kernels can read, of LIKE's shape, dtype and device."""
    _check_tensor(name, t, api)
    if t.shape != like.shape or t.dtype != like.dtype or t.device != like.device:
        raise ValueError(f"{name} is {t.dtype} {tuple(t.shape)} on {t.device}; it must match "
                         f"{like_name}: {like.dtype} {tuple(like.shape)} on {like.device}")


def _set_strides(a, name, t):
    if t.dim() == 3:  # packed varlen rows: the batch stride is ignored
        sb, (sr, sh, _) = 0, t.stride()
    else:
        sb, sr, sh, _ = t.stride()
    setattr(a, f"{name}_batch_stride", sb)
    setattr(a, f"{name}_row_stride", sr)
    setattr(a, f"{name}_head_stride", sh)


def _args(q, k, v, o, lse, opts):
    import torch
    a = _abi.fat_attn_args()
    a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        _set_strides(a, name, t)
    a.batch, a.seqlen_q, a.heads, a.head_dim = q.shape
    a.seqlen_k, a.heads_k = k.shape[1], k.shape[2]
    a.dtype = _BF16 if q.dtype == torch.bfloat16 else _FP16
    opts.fill(a)
    return a


def _bwd_args(fwd, dout, dq, dk, dv, deterministic):
    """fat_attn_bwd_args of the forward whose fat_attn_args is FWD."""
    a = _abi.fat_attn_bwd_args()
    a.fwd = fwd
    a.dout, a.dq, a.dk, a.dv = dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    for name, t in (("do", dout), ("dq", dq), ("dk", dk), ("dv", dv)):
        _set_strides(a, name, t)
    a.deterministic = 1 if deterministic else 0
    return a


def _launch_fwd(a, device, like, api):
    """fat_attention_fwd of ARGS on DEVICE's current stream, with the forward
    workspace the chosen variant needs from the torch caching allocator
    (on LIKE's device)."""
    import torch
    lib = _load()
    ctx = _context(device)
    need = ctypes.c_size_t()
    st = lib.fat_attention_fwd_workspace(ctx, ctypes.byref(a), ctypes.byref(need))
    if st != FAT_OK:
        _raise(lib, ctx, st, api)
    workspace = None
    if need.value:
        # On the current stream, which the launch uses: freed on return, it is
        # reused only by work queued after the forward's. The allocator's
        # blocks are aligned far beyond the 16 bytes asked for.
        workspace = torch.empty(need.value, dtype=torch.uint8, device=like.device)
        a.workspace, a.workspace_bytes = workspace.data_ptr(), need.value
    st = lib.fat_attention_fwd(ctx, ctypes.byref(a), _stream(device), None)
    if st != FAT_OK:
        _raise(lib, ctx, st, api)
    del workspace


def _forward(q, k, v, opts):
    """(o, lse, args) by fat_attention_fwd, outside autograd; args is the
    checked fat_attn_args of the call, without the forward's workspace (the
    backward starts from it)."""
    import torch
    _check(q, k, v)
    b, sq, h, _ = q.shape
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
    a = _args(q, k, v, o, lse, opts)
    _launch_fwd(a, _device(q), q, "fatune.attention")
    a.workspace, a.workspace_bytes = None, 0
    return o, lse, a


def attention_bwd(dout, q, k, v, o, lse, *, causal=False, softmax_scale=None, window_size=(-1, -1),
                  deterministic=False, dq=None, dk=None, dv=None, scale=None):
    """The gradients (dq, dk, dv) of attention(q, k, v, causal=causal,
    softmax_scale=softmax_scale, window_size=window_size) for the incoming
    gradient DOUT, given the forward's O and LSE (from attention_with_lse),
    by fat_attention_bwd on the current stream; every argument after lse by
    keyword only. dq has q's shape, dk and dv k's (heads_k heads: the
    gradients of a group's query heads are summed). DQ, DK, DV, when given,
    are written (every element) and returned; otherwise they are allocated in
    the layouts of q, k and v. DOUT is copied first when the kernels cannot
    read it where it lies. There is no soft-cap here: libfatune's backward
    has none."""
    import torch
    api = "fatune.attention_bwd"
    _check_bool("deterministic", deterministic)
    value, name = _scale_arg(api, softmax_scale, scale)
    opts = _Options(causal, value, window_size, scale_name=name)
    _check(q, k, v, api)
    _check_like("o", o, q, "q", api)
    if not isinstance(dout, torch.Tensor):
        raise TypeError(f"dout must be a torch.Tensor, got {type(dout).__name__}")
    if dout.shape != q.shape or dout.dtype != q.dtype or dout.device != q.device:
        raise ValueError(f"dout is {dout.dtype} {tuple(dout.shape)} on {dout.device}; it must match "
                         f"q: {q.dtype} {tuple(q.shape)} on {q.device}")
    b, sq, h, _ = q.shape
    if not isinstance(lse, torch.Tensor):
        raise TypeError(f"lse must be a torch.Tensor, got {type(lse).__name__}")
    if (lse.shape != (b, h, sq) or lse.dtype != torch.float32 or lse.device != q.device
            or not lse.is_contiguous()):
        raise ValueError(f"lse is {lse.dtype} {tuple(lse.shape)} on {lse.device}; it must be the "
                         f"forward's contiguous torch.float32 {(b, h, sq)} on {q.device}")
    for name, g, like, like_name in (("dq", dq, q, "q"), ("dk", dk, k, "k"), ("dv", dv, v, "v")):
        if g is not None:
            _check_like(name, g, like, like_name, api)
    return _backward(_args(q, k, v, o, lse, opts), dout, q, k, v, deterministic, dq, dk, dv, api)


def _backward(fwd, dout, q, k, v, deterministic, dq=None, dk=None, dv=None, api="fatune.attention"):
    """fat_attention_bwd for the forward whose (checked) fat_attn_args is
    FWD, on q, k, v (its tensors); DOUT of q's shape, dtype and device; the
    gradients DQ, DK, DV written where given (checked), else allocated in
    the layouts of q, k, v. Autograd's backward comes here straight from
    the forward's arguments: every microsecond before the first launch is
    one the GPU waits when nothing else is queued."""
    import torch
    dout = _kernel_layout(dout)
    if dq is None:
        dq = torch.empty_like(q)  # q's strides when it is dense, else contiguous
    if dk is None:
        dk = torch.empty_like(k)
    if dv is None:
        dv = torch.empty_like(v)
    lib = _load()
    device = _device(q)
    ctx = _context(device)
    a = _bwd_args(fwd, dout, dq, dk, dv, deterministic)
    need = ctypes.c_size_t()
    st = lib.fat_attention_bwd_workspace(ctx, ctypes.byref(a), ctypes.byref(need))
    if st != FAT_OK:
        _raise(lib, ctx, st, api)
    # From the caching allocator on the current stream, which the launch uses:
    # freed on return, it is reused only by work queued after the backward's.
    workspace = torch.empty(max(need.value, 1), dtype=torch.uint8, device=q.device)
    a.workspace, a.workspace_bytes = workspace.data_ptr(), need.value
    st = lib.fat_attention_bwd(ctx, ctypes.byref(a), _stream(device), None)
    if st != FAT_OK:
        _raise(lib, ctx, st, api)
    return dq, dk, dv


_functions = {}


def _autograd_functions():
    """The torch.autograd.Functions of attention and of the forward-only
    calls, defined on first use so that importing the package does not import
    torch."""
    if _functions:
        return _functions
    import torch
    from torch.autograd.function import once_differentiable

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, opts, deterministic):
            o, lse, args = _forward(q, k, v, opts)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.opts, ctx.deterministic, ctx.args = opts, deterministic, args
            ctx.mark_non_differentiable(lse)
            # lse gets no gradient: without this autograd would allocate and
            # zero one for every backward (a kernel and an allocation).
            ctx.set_materialize_grads(False)
            return o, lse

        @staticmethod
        @once_differentiable
        def backward(ctx, dout, _dlse):
            opts = ctx.opts
            if opts.softcap:
                raise NotImplementedError(
                    f"fatune.attention: softcap {opts.softcap:g} has no backward (libfatune's "
                    "fat_attention_bwd has no soft-cap); train with softcap=0.0, or run the "
                    "forward under torch.no_grad()")
            if dout is None:  # only the non-differentiable lse reached the loss
                return None, None, None, None, None
            # Unpacked for autograd's check that none was changed in place
            # since the forward; ctx.args holds their pointers, checked then.
            q, k, v, o, lse = ctx.saved_tensors
            dq, dk, dv = _backward(ctx.args, dout, q, k, v, ctx.deterministic)
            return dq, dk, dv, None, None

    class ForwardOnly(torch.autograd.Function):
        """RUN(q, k, v) -> (o, lse) in a graph whose backward raises WHY."""

        @staticmethod
        def forward(ctx, why, run, q, k, v):
            o, lse = run(q, k, v)
            ctx.why = why
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        def backward(ctx, _dout, _dlse):
            raise NotImplementedError(ctx.why)

    _functions.update(attention=Attention, forward_only=ForwardOnly)
    return _functions


def _needs_graph(*tensors):
    import torch
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                           for t in tensors)


def attention_with_lse(q, k, v, **options):
    """attention(q, k, v, return_softmax_lse=True, **options): (out, lse),
    lse the fp32 log-sum-exp (batch, heads, seqlen_q), natural log, -inf for
    a row that sees no key. The lse is not differentiable: a loss through it
    gets no gradient from it."""
    return attention(q, k, v, return_softmax_lse=True, **options)


def attention(q, k, v, *, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
              deterministic=False, return_softmax_lse=False, dropout_p=0.0, alibi_slopes=None,
              return_attn_probs=False, scale=None):
    """softmax(softmax_scale · q·kᵀ [soft-capped] [causal or window mask]) · v
    for CUDA tensors in PyTorch's (batch, seqlen, heads, head_dim) layout,
    fp16 or bf16, head_dim a multiple of 8 up to 256: flash_attn_func's
    arguments, each after q, k, v by keyword only. softmax_scale defaults to
    1/sqrt(head_dim) (scale= is the same argument by SDPA's name); causal
    and window_size (left, right; -1 unbounded) are bottom-right aligned,
    causal=True making the right bound 0. k and v may have fewer heads
    (grouped-query). Differentiable in q, k and v unless softcap > 0 (then
    the backward raises NotImplementedError); deterministic=True makes the
    backward bit-reproducible. Returns out, or (out, lse) with
    return_softmax_lse=True. dropout_p must be 0, alibi_slopes None and
    return_attn_probs False: fatune has none of them, and refuses rather
    than ignores them. Raises ValueError for a wrong dtype, device, shape,
    window or a non-contiguous last dimension, TypeError for a value of the
    wrong kind."""
    opts = _flash_options("fatune.attention", causal, softmax_scale, scale, window_size, softcap,
                          deterministic, dropout_p, alibi_slopes, return_attn_probs, return_softmax_lse)
    if _needs_graph(q, k, v):
        o, lse = _autograd_functions()["attention"].apply(q, k, v, opts, deterministic)
    else:
        o, lse = _forward(q, k, v, opts)[:2]  # no graph to record: skip autograd's cost
    return (o, lse) if return_softmax_lse else o


def _check_offsets(name, t, entries, device, api):
    """T must be a contiguous int32 tensor of ENTRIES entries on DEVICE."""
    import torch
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.int32 or t.dim() != 1 or t.device != device or t.stride(0) != 1:
        raise ValueError(f"{name} is {t.dtype} {tuple(t.shape)} on {t.device}; {api} takes a "
                         f"contiguous torch.int32 ({entries},) on {device}")
    if t.numel() != entries:
        raise ValueError(f"{name} has {t.numel()} entries; expected {entries}")


def _forward_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, opts, seqused_k):
    """(o, lse) of attention_varlen by fat_attention_fwd, outside autograd."""
    import torch
    api = "fatune.attention_varlen"
    _check(q, k, v, api, _PACKED)
    if not isinstance(cu_seqlens_q, torch.Tensor):
        raise TypeError(f"cu_seqlens_q must be a torch.Tensor, got {type(cu_seqlens_q).__name__}")
    if cu_seqlens_q.dim() != 1 or cu_seqlens_q.numel() < 2:
        raise ValueError(f"cu_seqlens_q has shape {tuple(cu_seqlens_q.shape)}; expected (batch + 1,) "
                         "with batch >= 1")
    batch = cu_seqlens_q.numel() - 1
    _check_offsets("cu_seqlens_q", cu_seqlens_q, batch + 1, q.device, api)
    _check_offsets("cu_seqlens_k", cu_seqlens_k, batch + 1, q.device, api)
    if seqused_k is not None:
        _check_offsets("seqused_k", seqused_k, batch, q.device, api)
    for name, x in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if not _is_int(x):
            raise TypeError(f"{name} must be an int, got {type(x).__name__}")
        if not 1 <= x <= _INT_MAX:
            raise ValueError(f"{name} {x} must be 1 .. {_INT_MAX}")
    total_q, h, _ = q.shape
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((h, total_q), dtype=torch.float32, device=q.device)
    a = _abi.fat_attn_args()
    a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        _set_strides(a, name, t)
    a.batch, a.heads, a.heads_k, a.head_dim = batch, h, k.shape[1], q.shape[2]
    a.seqlen_q, a.seqlen_k = max_seqlen_q, max_seqlen_k
    a.total_q, a.total_k = total_q, k.shape[0]
    a.cu_seqlens_q, a.cu_seqlens_k = cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr()
    a.seqused_k = seqused_k.data_ptr() if seqused_k is not None else None
    a.dtype = _BF16 if q.dtype == torch.bfloat16 else _FP16
    opts.fill(a)
    _launch_fwd(a, _device(q), q, api)
    return o, lse


def attention_varlen_with_lse(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **options):
    """attention_varlen(..., return_softmax_lse=True, **options): (out, lse),
    lse the fp32 log-sum-exp (heads, total_q), natural log, -inf for a row
    that sees no key."""
    return attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            return_softmax_lse=True, **options)


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
    Forward only: a backward through it raises NotImplementedError."""
    opts = _flash_options("fatune.attention_varlen", causal, softmax_scale, scale, window_size, softcap,
                          deterministic, dropout_p, alibi_slopes, return_attn_probs, return_softmax_lse)

    def run(q, k, v):
        return _forward_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, opts,
                               seqused_k)
    if _needs_graph(q, k, v):
        why = ("fatune.attention_varlen has no backward (libfatune's fat_attention_bwd takes no "
               "cu_seqlens); run it under torch.no_grad(), or use fatune.attention on padded tensors "
               "to train")
        o, lse = _autograd_functions()["forward_only"].apply(why, run, q, k, v)
    else:
        o, lse = run(q, k, v)
    return (o, lse) if return_softmax_lse else o


def _selected(q, k, v, select_fn, make_args, api):
    import torch
    _check(q, k, v, api)
    lib = _load()
    ctx = _context(_device(q))
    lse = torch.empty(1, device=q.device)  # only the shape is read
    a = make_args(lse)
    c = _abi.fat_choice()
    st = getattr(lib, select_fn)(ctx, ctypes.byref(a), ctypes.byref(c))
    if st != FAT_OK:
        raise ValueError(f"{api}: {lib.fat_context_error(ctx).decode()}")
    return Choice(lib, c)


def select(q, k, v, *, causal=False, window_size=(-1, -1), softcap=0.0):
    """The Choice fatune's forward would make for these tensors, without launching."""
    opts = _Options(causal, None, window_size, softcap)
    return _selected(q, k, v, "fat_attention_select",
                     lambda lse: _args(q, k, v, q, lse, opts), "fatune.select")


def select_bwd(q, k, v, *, causal=False, window_size=(-1, -1), deterministic=False):
    """The Choice fatune's backward would make for these tensors, without launching."""
    _check_bool("deterministic", deterministic)
    opts = _Options(causal, None, window_size)
    return _selected(q, k, v, "fat_attention_bwd_select",
                     lambda lse: _bwd_args(_args(q, k, v, q, lse, opts), q, q, k, v, deterministic),
                     "fatune.select_bwd")


def last_choice(device=None):
    """The Choice of the most recent launch on DEVICE (default: the current one),
    forward or backward."""
    import torch
    lib = _load()
    ctx = _context(torch.cuda.current_device() if device is None else device)
    c = _abi.fat_choice()
    st = lib.fat_context_last_choice(ctx, ctypes.byref(c))
    if st != FAT_OK:
        raise FatuneError(st, lib.fat_context_error(ctx).decode())
    return Choice(lib, c)
