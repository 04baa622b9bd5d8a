"""fatune for PyTorch: the tuned FlashAttention of libfatune on CUDA tensors,
forward and backward.

A thin ctypes binding, with no build step of its own:

    import fatune
    o = fatune.attention(q, k, v, causal=True)   # (batch, seqlen, heads, head_dim)
    o.sum().backward()                            # q.grad, k.grad, v.grad by libfatune
    fatune.last_choice()                          # which variant ran, and why

attention(q, k, v, causal=False, scale=None, deterministic=False)
    q (batch, seqlen_q, heads, head_dim), k and v (batch, seqlen_k, heads_k,
    head_dim) with heads_k dividing heads (grouped-query), fp16 or bf16.
    causal: bottom-right aligned (query i sees key j iff j <= i + seqlen_k -
    seqlen_q). scale multiplies q·kᵀ, None for 1/sqrt(head_dim).
    deterministic: the backward uses only variants without atomics, so the
    gradients are bit-identical from run to run (slower); it does not change
    the forward. Differentiable in q, k and v (torch.autograd): the backward
    recomputes the probabilities from q, k and the forward's log-sum-exp, so
    it keeps O(seqlen) memory, plus a device workspace of about 4 * batch *
    heads * seqlen_q * (1 + head_dim) bytes from the torch caching allocator
    while it runs. Not twice differentiable.
attention_with_lse(...)  the same, also returning the fp32 log-sum-exp
    (batch, heads, seqlen_q); the lse carries no gradient.
attention_bwd(dout, q, k, v, o, lse, ...)  the backward itself: (dq, dk, dv),
    into given tensors if dq, dk, dv are passed (dk, dv have heads_k heads).
select(q, k, v, ...), select_bwd(q, k, v, ...)  the Choice a launch would make.

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

__all__ = ["attention", "attention_with_lse", "attention_bwd", "last_choice", "select", "select_bwd",
           "Choice", "FatuneError"]

FAT_OK = _abi.STATUS["FAT_OK"]
_STATUS_NAMES = {v: k for k, v in _abi.STATUS.items()}
# The caller's problem: ValueError.
_CALLER_ERRORS = (_abi.STATUS["FAT_ERR_INVALID_ARGUMENT"], _abi.STATUS["FAT_ERR_UNSUPPORTED"])
_FP16, _BF16 = _abi.DTYPE["FAT_ATTN_FP16"], _abi.DTYPE["FAT_ATTN_BF16"]
_MASK_NONE, _MASK_CAUSAL = _abi.MASK["FAT_ATTN_MASK_NONE"], _abi.MASK["FAT_ATTN_MASK_CAUSAL"]
_ALIGN_BYTES = 16            # the kernels load 16 bytes at a time
_STRIDE_MULTIPLE = 8         # elements of a 16-byte load


class FatuneError(RuntimeError):
    """A libfatune call failed; .status is the fat_status name."""

    def __init__(self, status, message):
        self.status = _STATUS_NAMES.get(status, str(status))
        super().__init__(f"{self.status}: {message}")


class Choice:
    """The variant that served a problem: name, origin ('user database', 'shipped
    tables', 'built-in default'), match ('exact bucket', 'nearest bucket',
    'default'), bucket_seqlen, bucket_seqlen_k and bucket_group (the tuned
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
    return local if os.path.exists(local) else "libfatune.so.0"


_lib = None
_contexts = {}
_lock = threading.Lock()


def _load():
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(_library_path())
    _abi.declare(lib)
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


def _check_tensor(name, t, api="fatune.attention"):
    """TypeError unless T is a tensor; ValueError unless it is a 4-d fp16/bf16
    CUDA tensor the kernels can read: last dimension contiguous, the others'
    strides multiples of 8 elements, data 16-byte aligned."""
    import torch
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_cuda:
        raise ValueError(f"{name} is on {t.device}; {api} needs CUDA tensors")
    if t.dim() != 4:
        raise ValueError(f"{name} has {t.dim()} dimensions; expected 4: "
                         "(batch, seqlen, heads, head_dim)")
    if t.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"{name} is {t.dtype}; {api} takes torch.float16 or torch.bfloat16")
    if 0 in t.shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}: every dimension must be >= 1")
    if t.stride(3) != 1:
        raise ValueError(f"{name} has stride {t.stride(3)} in its last dimension; it must be "
                         "contiguous (stride 1)")
    if not _aligned(t):
        raise ValueError(f"{name} strides {tuple(t.stride())} must be multiples of "
                         f"{_STRIDE_MULTIPLE} and its data {_ALIGN_BYTES}-byte aligned")


def _aligned(t):
    return all(s % _STRIDE_MULTIPLE == 0 for s in t.stride()[:3]) and t.data_ptr() % _ALIGN_BYTES == 0


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
    if t.stride(3) == 1 and _aligned(t) and disjoint:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _check(q, k, v, causal, scale, api="fatune.attention"):
    """Python-side refusals, before libfatune's own (fat_attention_check):
    TypeError for a value of the wrong kind, ValueError for a wrong one."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t, api)
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k and v must share a dtype: got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"q, k and v must be on one device: got {q.device}, {k.device}, {v.device}")
    b, sq, h, d = q.shape
    if k.shape != v.shape or k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: k and v "
                         "must match, with q's batch and head_dim")
    if h % k.shape[2]:
        raise ValueError(f"k/v heads {k.shape[2]} do not divide q heads {h}")
    if scale is not None and not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale {scale} must be positive and finite")


def _check_like(name, t, like, like_name, api):
    """T must be a tensor the kernels can read, of LIKE's shape, dtype and device."""
    _check_tensor(name, t, api)
    if t.shape != like.shape or t.dtype != like.dtype or t.device != like.device:
        raise ValueError(f"{name} is {t.dtype} {tuple(t.shape)} on {t.device}; it must match "
                         f"{like_name}: {like.dtype} {tuple(like.shape)} on {like.device}")


def _set_strides(a, name, t):
    sb, sr, sh, _ = t.stride()
    setattr(a, f"{name}_batch_stride", sb)
    setattr(a, f"{name}_row_stride", sr)
    setattr(a, f"{name}_head_stride", sh)


def _args(q, k, v, o, lse, causal, scale):
    import torch
    a = _abi.fat_attn_args()
    a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        _set_strides(a, name, t)
    a.batch, a.seqlen_q, a.heads, a.head_dim = q.shape
    a.seqlen_k, a.heads_k = k.shape[1], k.shape[2]
    a.dtype = _BF16 if q.dtype == torch.bfloat16 else _FP16
    a.mask = _MASK_CAUSAL if causal else _MASK_NONE
    a.softmax_scale = 0.0 if scale is None else float(scale)
    return a


def _bwd_args(q, k, v, o, lse, dout, dq, dk, dv, causal, scale, deterministic):
    a = _abi.fat_attn_bwd_args()
    a.fwd = _args(q, k, v, o, lse, causal, scale)
    a.dout, a.dq, a.dk, a.dv = dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    for name, t in (("do", dout), ("dq", dq), ("dk", dk), ("dv", dv)):
        _set_strides(a, name, t)
    a.deterministic = 1 if deterministic else 0
    return a


def _forward(q, k, v, causal, scale):
    """(o, lse) by fat_attention_fwd, outside autograd."""
    import torch
    _check(q, k, v, causal, scale)
    lib = _load()
    device = _device(q)
    ctx = _context(device)
    b, sq, h, _ = q.shape
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
    a = _args(q, k, v, o, lse, causal, scale)
    st = lib.fat_attention_fwd(ctx, ctypes.byref(a), _stream(device), None)
    if st != FAT_OK:
        _raise(lib, ctx, st, "fatune.attention")
    return o, lse


def attention_bwd(dout, q, k, v, o, lse, causal=False, scale=None, deterministic=False,
                  dq=None, dk=None, dv=None):
    """The gradients (dq, dk, dv) of attention(q, k, v, causal, scale)
    for the incoming gradient DOUT, given the forward's O and LSE (from
    attention_with_lse), by fat_attention_bwd on the current stream. dq has
    q's shape, dk and dv k's (heads_k heads: the gradients of a group's query
    heads are summed). DQ, DK, DV, when given, are written (every element) and
    returned; otherwise they are allocated in the layouts of q, k and v. DOUT
    is copied first when the kernels cannot read it where it lies."""
    import torch
    api = "fatune.attention_bwd"
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool, got {deterministic!r}")
    _check(q, k, v, causal, scale, api)
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
    dout = _kernel_layout(dout)
    grads = []
    for name, g, like, like_name in (("dq", dq, q, "q"), ("dk", dk, k, "k"), ("dv", dv, v, "v")):
        if g is None:
            g = torch.empty_like(like)  # like's strides when it is dense, else contiguous
        else:
            _check_like(name, g, like, like_name, api)
        grads.append(g)
    dq, dk, dv = grads
    lib = _load()
    device = _device(q)
    ctx = _context(device)
    a = _bwd_args(q, k, v, o, lse, dout, dq, dk, dv, causal, scale, deterministic)
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


_function = None


def _autograd_function():
    """The torch.autograd.Function of attention, defined on first use so that
    importing the package does not import torch."""
    global _function
    if _function is not None:
        return _function
    import torch
    from torch.autograd.function import once_differentiable

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal, scale, deterministic):
            o, lse = _forward(q, k, v, causal, scale)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal, ctx.softmax_scale, ctx.deterministic = causal, scale, deterministic
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        @once_differentiable
        def backward(ctx, dout, _dlse):
            q, k, v, o, lse = ctx.saved_tensors
            dq, dk, dv = attention_bwd(dout, q, k, v, o, lse, ctx.causal, ctx.softmax_scale,
                                       ctx.deterministic)
            return dq, dk, dv, None, None, None

    _function = Attention
    return Attention


def attention_with_lse(q, k, v, causal=False, scale=None, deterministic=False):
    """As attention(), also returning the fp32 log-sum-exp (batch, heads,
    seqlen_q), natural log, -inf for a row that sees no key. The lse is not
    differentiable: a loss through it gets no gradient from it."""
    import torch
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool, got {deterministic!r}")
    tensors = [t for t in (q, k, v) if isinstance(t, torch.Tensor)]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return _autograd_function().apply(q, k, v, causal, scale, deterministic)
    return _forward(q, k, v, causal, scale)  # no graph to record: skip autograd's cost


def attention(q, k, v, causal=False, scale=None, deterministic=False):
    """softmax(scale · q·kᵀ [causal mask]) · v for CUDA tensors in
    PyTorch's (batch, seqlen, heads, head_dim) layout, fp16 or bf16;
    scale defaults to 1/sqrt(head_dim); causal is bottom-right
    aligned. k and v may have fewer heads (grouped-query). Differentiable in
    q, k and v; deterministic=True makes the backward bit-reproducible.
    Returns the output tensor; raises ValueError for a wrong dtype, device,
    shape or a non-contiguous last dimension, TypeError for a non-tensor."""
    return attention_with_lse(q, k, v, causal, scale, deterministic)[0]


def _selected(q, k, v, causal, select_fn, make_args, api):
    import torch
    _check(q, k, v, causal, None, api)
    lib = _load()
    ctx = _context(_device(q))
    lse = torch.empty(1, device=q.device)  # only the shape is read
    a = make_args(lse)
    c = _abi.fat_choice()
    st = getattr(lib, select_fn)(ctx, ctypes.byref(a), ctypes.byref(c))
    if st != FAT_OK:
        raise ValueError(f"{api}: {lib.fat_context_error(ctx).decode()}")
    return Choice(lib, c)


def select(q, k, v, causal=False):
    """The Choice fatune's forward would make for these tensors, without launching."""
    return _selected(q, k, v, causal, "fat_attention_select",
                     lambda lse: _args(q, k, v, q, lse, causal, None), "fatune.select")


def select_bwd(q, k, v, causal=False, deterministic=False):
    """The Choice fatune's backward would make for these tensors, without launching."""
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool, got {deterministic!r}")
    return _selected(q, k, v, causal, "fat_attention_bwd_select",
                     lambda lse: _bwd_args(q, k, v, q, lse, q, q, k, v, causal, None, deterministic),
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
