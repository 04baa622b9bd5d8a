"""fatune for PyTorch: the tuned FlashAttention forward of libfatune on CUDA tensors.

A thin ctypes binding, with no build step of its own:

    import fatune
    o = fatune.attention(q, k, v, causal=True)   # (batch, seqlen, heads, head_dim)
    fatune.last_choice()                          # which variant ran, and why

The library is found at $FATUNE_LIB, else ../build/runtime/libfatune.so relative
to this package (a source checkout), else by the system loader (an install).
One libfatune context is opened per CUDA device on first use; launches go to
the current torch stream.
"""
import ctypes
import math
import os
import threading

__all__ = ["attention", "attention_with_lse", "last_choice", "select", "Choice", "FatuneError"]

FAT_OK = 0
_STATUS_NAMES = {
    0: "FAT_OK", 1: "FAT_ERR_INVALID_ARGUMENT", 2: "FAT_ERR_UNSUPPORTED", 3: "FAT_ERR_NO_DRIVER",
    4: "FAT_ERR_CUDA", 5: "FAT_ERR_NO_NVRTC", 6: "FAT_ERR_COMPILE", 7: "FAT_ERR_DATABASE",
    8: "FAT_ERR_OUT_OF_MEMORY", 9: "FAT_ERR_INTEGRITY",
}
_INVALID_ARGUMENT, _UNSUPPORTED = 1, 2  # the caller's problem: ValueError
_FP16, _BF16 = 0, 1          # fat_attn_dtype
_MASK_NONE, _MASK_CAUSAL = 0, 1  # fat_attn_mask
_ALIGN_BYTES = 16            # the kernels load 16 bytes at a time
_STRIDE_MULTIPLE = 8         # elements of a 16-byte load


class FatuneError(RuntimeError):
    """A libfatune call failed; .status is the fat_status name."""

    def __init__(self, status, message):
        self.status = _STATUS_NAMES.get(status, str(status))
        super().__init__(f"{self.status}: {message}")


class _Args(ctypes.Structure):  # fat_attn_args
    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p)] + [
        (f"{t}_{s}_stride", ctypes.c_longlong) for t in "qkvo" for s in ("batch", "row", "head")] + [
        ("batch", ctypes.c_int), ("heads", ctypes.c_int), ("heads_k", ctypes.c_int),
        ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int), ("head_dim", ctypes.c_int),
        ("dtype", ctypes.c_int), ("mask", ctypes.c_int), ("softmax_scale", ctypes.c_float)]


class _Choice(ctypes.Structure):  # fat_choice
    _fields_ = [("variant", ctypes.c_char * 128), ("source_hash", ctypes.c_char * 65),
                ("origin", ctypes.c_int), ("match", ctypes.c_int), ("bucket_seqlen", ctypes.c_int),
                ("tuned_ms", ctypes.c_double), ("loaded", ctypes.c_int), ("load", ctypes.c_int),
                ("db_path", ctypes.c_char * 512), ("note", ctypes.c_char * 256)]


class _Options(ctypes.Structure):  # fat_context_options
    _fields_ = [("device", ctypes.c_int), ("user_db", ctypes.c_char_p),
                ("tables", ctypes.POINTER(ctypes.c_char_p)), ("n_tables", ctypes.c_int),
                ("no_builtin", ctypes.c_int), ("gpu_name", ctypes.c_char_p),
                ("gpu_cc_major", ctypes.c_int), ("gpu_cc_minor", ctypes.c_int),
                ("gpu_sm_count", ctypes.c_int)]


class Choice:
    """The variant that served a problem: name, origin ('user database', 'shipped
    tables', 'built-in default'), match ('exact bucket', 'nearest bucket',
    'default'), bucket_seqlen, tuned_ms, load ('stored cubin', 'compiled with
    NVRTC'), db_path, note (why no stored cubin served, '' when one did)."""

    def __init__(self, lib, c):
        self.variant = c.variant.decode()
        self.source_hash = c.source_hash.decode()
        self.origin = lib.fat_origin_name(c.origin).decode()
        self.match = lib.fat_match_name(c.match).decode()
        self.bucket_seqlen = c.bucket_seqlen
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
    lib.fat_strerror.restype = ctypes.c_char_p
    lib.fat_context_error.restype = ctypes.c_char_p
    lib.fat_context_error.argtypes = [ctypes.c_void_p]
    lib.fat_context_open.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(_Options)]
    lib.fat_attention_fwd.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Args), ctypes.c_void_p,
                                      ctypes.POINTER(_Choice)]
    lib.fat_attention_select.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Args), ctypes.POINTER(_Choice)]
    lib.fat_context_last_choice.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Choice)]
    lib.fat_context_close.argtypes = [ctypes.c_void_p]
    for f in ("fat_origin_name", "fat_match_name", "fat_load_name"):
        getattr(lib, f).restype = ctypes.c_char_p
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
        opts = _Options(device=device)
        st = lib.fat_context_open(ctypes.byref(ctx), ctypes.byref(opts))
        if st != FAT_OK:
            msg = lib.fat_context_error(ctx).decode() if ctx.value else lib.fat_strerror(st).decode()
            lib.fat_context_close(ctx)
            raise FatuneError(st, msg)
        _contexts[device] = ctx
        return ctx


def _check(q, k, v, causal, scale):
    """Python-side refusals, before libfatune's own (fat_attention_check):
    TypeError for a value of the wrong kind, ValueError for a wrong one."""
    import torch
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_cuda:
            raise ValueError(f"{name} is on {t.device}; fatune.attention needs CUDA tensors")
        if t.dim() != 4:
            raise ValueError(f"{name} has {t.dim()} dimensions; expected 4: "
                             "(batch, seqlen, heads, head_dim)")
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"{name} is {t.dtype}; fatune.attention takes torch.float16 or "
                             "torch.bfloat16")
        if 0 in t.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}: every dimension must be >= 1")
        if t.stride(3) != 1:
            raise ValueError(f"{name} has stride {t.stride(3)} in its last dimension; it must be "
                             "contiguous (stride 1)")
        if any(s % _STRIDE_MULTIPLE for s in t.stride()[:3]) or t.data_ptr() % _ALIGN_BYTES:
            raise ValueError(f"{name} strides {tuple(t.stride())} must be multiples of "
                             f"{_STRIDE_MULTIPLE} and its data {_ALIGN_BYTES}-byte aligned")
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


def _args(q, k, v, o, lse, causal, scale):
    import torch
    a = _Args()
    a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        sb, sr, sh, _ = t.stride()
        setattr(a, f"{name}_batch_stride", sb)
        setattr(a, f"{name}_row_stride", sr)
        setattr(a, f"{name}_head_stride", sh)
    a.batch, a.seqlen_q, a.heads, a.head_dim = q.shape
    a.seqlen_k, a.heads_k = k.shape[1], k.shape[2]
    a.dtype = _BF16 if q.dtype == torch.bfloat16 else _FP16
    a.mask = _MASK_CAUSAL if causal else _MASK_NONE
    a.softmax_scale = 0.0 if scale is None else float(scale)
    return a


def attention_with_lse(q, k, v, causal=False, scale=None):
    """As attention(), also returning the fp32 log-sum-exp (batch, heads, seqlen_q)."""
    import torch
    _check(q, k, v, causal, scale)
    lib = _load()
    device = q.device.index if q.device.index is not None else torch.cuda.current_device()
    ctx = _context(device)
    b, sq, h, _ = q.shape
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
    a = _args(q, k, v, o, lse, causal, scale)
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream().cuda_stream
    st = lib.fat_attention_fwd(ctx, ctypes.byref(a), ctypes.c_void_p(stream), None)
    if st != FAT_OK:
        msg = lib.fat_context_error(ctx).decode()
        if st in (_INVALID_ARGUMENT, _UNSUPPORTED):  # the caller's problem
            raise ValueError(f"fatune.attention: {msg}")
        raise FatuneError(st, msg)
    return o, lse


def attention(q, k, v, causal=False, scale=None):
    """softmax(scale · q·kᵀ [causal mask]) · v for CUDA tensors in PyTorch's
    (batch, seqlen, heads, head_dim) layout, fp16 or bf16; scale defaults to
    1/sqrt(head_dim); causal is bottom-right aligned. k and v may have fewer
    heads (grouped-query). Returns the output tensor; raises ValueError for a
    wrong dtype, device, shape or a non-contiguous last dimension."""
    return attention_with_lse(q, k, v, causal, scale)[0]


def select(q, k, v, causal=False):
    """The Choice fatune would make for these tensors, without launching."""
    import torch
    _check(q, k, v, causal, None)
    lib = _load()
    device = q.device.index if q.device.index is not None else torch.cuda.current_device()
    ctx = _context(device)
    lse = torch.empty(1, device=q.device)
    a = _args(q, k, v, q, lse, causal, None)
    c = _Choice()
    st = lib.fat_attention_select(ctx, ctypes.byref(a), ctypes.byref(c))
    if st != FAT_OK:
        raise ValueError(f"fatune.select: {lib.fat_context_error(ctx).decode()}")
    return Choice(lib, c)


def last_choice(device=None):
    """The Choice of the most recent launch on DEVICE (default: the current one)."""
    import torch
    lib = _load()
    ctx = _context(torch.cuda.current_device() if device is None else device)
    c = _Choice()
    st = lib.fat_context_last_choice(ctx, ctypes.byref(c))
    if st != FAT_OK:
        raise FatuneError(st, lib.fat_context_error(ctx).decode())
    return Choice(lib, c)
