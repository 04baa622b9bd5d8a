# SPDX-License-Identifier: MIT
"""libfatune through ctypes: the library and its contexts, the checks of the
tensors a call hands it, the fat_attn_args / fat_attn_bwd_args blocks, and
the launches. This is what runs inside the torch.library operators
(_ops.py), on real tensors; the operators' fake implementations ask only
the checks that read no storage (storage=False), so that fake and meta
tensors are checked as real ones are, shapes and dtypes alike.

The options arrive checked (the public functions in __init__.py check
them) as fat_attn_args' own terms: mask one of FAT_ATTN_MASK_*, the window
(-1, -1) unless the mask is local, softmax_scale 0.0 for 1/sqrt(head_dim),
softcap 0.0 for none.
"""
import ctypes
import os
import threading

try:
    import torch
except ImportError:  # FatuneError and Choice import without it; nothing else runs
    torch = None

from . import _abi

FAT_OK = _abi.STATUS["FAT_OK"]
_STATUS_NAMES = {v: k for k, v in _abi.STATUS.items()}
# The caller's problem: ValueError.
_CALLER_ERRORS = (_abi.STATUS["FAT_ERR_INVALID_ARGUMENT"], _abi.STATUS["FAT_ERR_UNSUPPORTED"])
_FP16, _BF16 = _abi.DTYPE["FAT_ATTN_FP16"], _abi.DTYPE["FAT_ATTN_BF16"]
_E4M3 = _abi.DTYPE["FAT_ATTN_E4M3"]
# An fp8 K/V cache: q and o in the 16-bit type, k and v e4m3.
_KV8 = {"torch.float16": _abi.DTYPE["FAT_ATTN_FP16_E4M3KV"], "torch.bfloat16": _abi.DTYPE["FAT_ATTN_BF16_E4M3KV"]}
ALIGN_BYTES = 16            # the kernels load 16 bytes at a time
STRIDE_MULTIPLE = 8         # elements of a 16-byte load (fp16, bf16; e4m3's are 16)
INT_MAX = 2**31 - 1         # the C API's int fields
DENSE = "(batch, seqlen, heads, head_dim)"
PACKED = "(total, heads, head_dim)"  # attention_varlen's q, k, v
# Devices a tensor may be on: CUDA to launch; meta (and fake tensors, which
# report the device they stand for) for shapes only, never launched.
_SHAPE_ONLY = "meta"
_SIXTEEN = (torch.float16, torch.bfloat16) if torch is not None else ()


def _e4m3_dtype():
    """torch.float8_e4m3fn, or None where this PyTorch has no fp8."""
    return getattr(torch, "float8_e4m3fn", None) if torch is not None else None


def is_e4m3(t):
    """Whether T is a tensor of FP8 E4M3FN values (fatune's e4m3 inputs)."""
    return isinstance(t, torch.Tensor) and t.dtype == _e4m3_dtype() and t.dtype is not None


def fp8_kind(q, k, v, api, names=("q", "k", "v")):
    """How Q, K, V use fp8: None (none is e4m3), "all" (all three
    torch.float8_e4m3fn: the e4m3 forward) or "kv" (k and v e4m3 with an
    fp16 or bf16 q: an fp8 K/V cache). Any other mix, and an fp8 format
    other than E4M3FN, is a ValueError naming the dtypes (NAMES: the
    caller's names of the three)."""
    if (getattr(q, "dtype", None) in _SIXTEEN and getattr(k, "dtype", None) in _SIXTEEN
            and getattr(v, "dtype", None) in _SIXTEEN):
        return None  # the common case, without str(dtype) three times
    e4m3 = [is_e4m3(t) for t in (q, k, v)]
    for name, t in zip(names, (q, k, v)):
        if isinstance(t, torch.Tensor) and not is_e4m3(t) and "float8" in str(t.dtype):
            raise ValueError(f"{api}: {name} is {t.dtype}: fatune's fp8 is FP8 E4M3FN "
                             "(torch.float8_e4m3fn) only")
    if not any(e4m3):
        return None
    if all(e4m3):
        return "all"
    if e4m3 == [False, True, True] and getattr(q, "dtype", None) in (torch.float16, torch.bfloat16):
        return "kv"
    dtypes = ", ".join(str(getattr(t, "dtype", type(t).__name__)) for t in (q, k, v))
    raise ValueError(f"{api}: {', '.join(names[:2])} and {names[2]} are {dtypes}: "
                     f"fp8 inputs are all three torch.float8_e4m3fn, or {names[1]} and {names[2]} alone "
                     f"with a torch.float16 or torch.bfloat16 {names[0]} (an fp8 K/V cache)")


def _stride_multiple(t):
    """Elements of one 16-byte load of T's dtype: 8 of fp16 and bf16, 16 of e4m3."""
    return ALIGN_BYTES // t.element_size()


class FatuneError(RuntimeError):
    """A libfatune call failed; .status is the fat_status name."""

    def __init__(self, status, message):
        self.status = _STATUS_NAMES.get(status, str(status))
        super().__init__(f"{self.status}: {message}")


class Choice:
    """The variant that served a problem: name, origin ('user database', 'shipped
    tables', 'built-in default', 'same architecture': another GPU's winner of
    this architecture, note names it), match ('exact bucket', 'nearest bucket',
    'default'), bucket_seqlen, bucket_seqlen_k, bucket_group and bucket_window
    ((left, right) of a local mask, -1 unbounded; (0, 0) otherwise: the tuned
    problem's key), bucket_page_size (a paged call's tuned page size, 0 for a
    contiguous cache), tuned_ms, load ('stored cubin', 'compiled with
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
        self.bucket_page_size = c.bucket_page_size
        self.tuned_ms = c.tuned_ms
        self.load = lib.fat_load_name(c.load).decode() if c.loaded else None
        self.db_path = c.db_path.decode()
        self.note = c.note.decode()

    def __repr__(self):
        return (f"Choice({self.variant}, {self.origin}, {self.match}, bucket {self.bucket_seqlen}, "
                f"load {self.load})")


# ---- the library and its contexts --------------------------------------------

# Where a wheel puts the library: inside the package (python/fatune/lib/).
PACKAGE_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "libfatune.so")


def library_path():
    """$FATUNE_LIB, else the library inside the package (an installed
    wheel), else the build tree's of this checkout, else the soname for the
    system loader (a cmake --install)."""
    env = os.environ.get("FATUNE_LIB")
    if env:
        return env
    if os.path.exists(PACKAGE_LIB):
        return PACKAGE_LIB
    here = os.path.dirname(os.path.abspath(__file__))
    local = os.path.join(here, "..", "..", "build", "runtime", "libfatune.so")
    return local if os.path.exists(local) else _abi.SONAME


_lib = None
_contexts = {}
_context_listeners = []
_lock = threading.Lock()


def load():
    global _lib
    if _lib is not None:
        return _lib
    path = library_path()
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


def context(device):
    """The libfatune context of DEVICE (an int), opened once per process."""
    ctx = _contexts.get(device)  # never removed once made: no lock to read it
    if ctx is not None:
        return ctx
    with _lock:
        ctx = _contexts.get(device)
        if ctx is not None:
            return ctx
        lib = load()
        ctx = ctypes.c_void_p()
        opts = _abi.fat_context_options(device=device)
        st = lib.fat_context_open(ctypes.byref(ctx), ctypes.byref(opts))
        if st != FAT_OK:
            msg = lib.fat_context_error(ctx).decode() if ctx.value else lib.fat_strerror(st).decode()
            lib.fat_context_close(ctx)
            raise FatuneError(st, msg)
        _contexts[device] = ctx
        for listener in _context_listeners:
            listener(device, ctx.value)
        return ctx


def on_context_open(listener):
    """LISTENER(device, context pointer) for each context open now and each
    opened later (the native path's set_context)."""
    with _lock:
        _context_listeners.append(listener)
        for device, ctx in _contexts.items():
            listener(device, ctx.value)


def device_index(t):
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


def stream(device):
    """The current torch stream of DEVICE, as a CUstream (under CUDA-graph
    capture, the capturing stream)."""
    return ctypes.c_void_p(_raw_stream(device))


def _raw_stream_of(device):
    return torch.cuda.current_stream(device).cuda_stream


# The current stream's handle without building a torch.cuda.Stream (a tenth
# of the time; what torch's own compiled code calls), where torch has it.
_raw_stream = (getattr(torch._C, "_cuda_getCurrentRawStream", None) or _raw_stream_of
               if torch is not None else None)


def _raise(lib, ctx, st, api):
    msg = lib.fat_context_error(ctx).decode()
    if st in _CALLER_ERRORS:
        raise ValueError(f"{api}: {msg}")
    raise FatuneError(st, msg)


# ---- the tensors' checks ---------------------------------------------------------


def check_tensor(name, t, api="fatune.attention", layout=DENSE, storage=True, fp8=False):
    """TypeError unless T is a tensor; ValueError unless it is an fp16/bf16
    (FP8: torch.float8_e4m3fn; its callers have named any other mix of
    dtypes first: fp8_kind) CUDA tensor of LAYOUT's dimensions the
    kernels can read: head_dim a multiple of 8 (e4m3: 16), last dimension
    contiguous, the others' strides multiples of 8 elements (e4m3: 16, one
    16-byte load either way), data 16-byte aligned. STORAGE False (a fake or
    meta tensor, which has none): all but the data's alignment, and the meta
    device allowed."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not (t.is_cuda or (not storage and t.device.type == _SHAPE_ONLY)):
        raise ValueError(f"{name} is on {t.device}; {api} needs CUDA tensors")
    ndim = layout.count(",") + 1
    if t.dim() != ndim:
        raise ValueError(f"{name} has {t.dim()} dimensions; expected {ndim}: {layout}")
    if fp8 and t.dtype != _e4m3_dtype():
        raise ValueError(f"{name} is {t.dtype}; with fp8 inputs {api} takes torch.float8_e4m3fn q, k "
                         "and v")
    if not fp8 and is_e4m3(t):
        raise ValueError(f"{name} is {t.dtype}: {api} has no fp8 path (fp8 e4m3 is "
                         "fatune.attention's forward only, on Hopper, and an fp8 K/V cache's k and v); "
                         "it takes torch.float16 or torch.bfloat16")
    if not fp8 and t.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"{name} is {t.dtype}; {api} takes torch.float16 or torch.bfloat16")
    if 0 in t.shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}: every dimension must be >= 1")
    multiple = _stride_multiple(t)
    if t.shape[-1] % multiple:
        of = f" for {t.dtype}" if fp8 else ""
        raise ValueError(f"{name} has head_dim {t.shape[-1]}; {api} takes multiples of "
                         f"{multiple}{of} (the kernels load {ALIGN_BYTES} bytes at a time)")
    if t.stride(-1) != 1:
        raise ValueError(f"{name} has stride {t.stride(-1)} in its last dimension; it must be "
                         "contiguous (stride 1)")
    if not (_strides_aligned(t) and (not storage or t.data_ptr() % ALIGN_BYTES == 0)):
        raise ValueError(f"{name} strides {tuple(t.stride())} must be multiples of "
                         f"{multiple} and its data {ALIGN_BYTES}-byte aligned")


def _strides_aligned(t):
    multiple = _stride_multiple(t)
    return all(s % multiple == 0 for s in t.stride()[:-1])


def kernel_layout(t):
    """T itself if the kernels can read it where it lies (as check_tensor
    demands, and no element reachable by two indices, which libfatune refuses
    for every tensor), else a contiguous (batch, seqlen, heads, head_dim) copy
    in a fresh, hence aligned, allocation. For tensors the caller does not
    choose: the gradient autograd hands the backward may be expanded (stride
    0, from o.sum()) or a transpose."""
    disjoint, span = True, 1  # span: elements inside the dimensions seen so far
    for st, n in sorted((st, n) for st, n in zip(t.stride(), t.shape) if n > 1):
        disjoint = disjoint and st >= span
        span = st * n
    if t.stride(-1) == 1 and _strides_aligned(t) and t.data_ptr() % ALIGN_BYTES == 0 and disjoint:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def check_qkv(q, k, v, api="fatune.attention", layout=DENSE, storage=True, fp8=None):
    """Python-side refusals of q, k and v, before libfatune's own
    (fat_attention_check): TypeError for a value of the wrong kind, ValueError
    for a wrong one. FP8 (fp8_kind's): "all", all three
    torch.float8_e4m3fn; "kv", k and v alone (q fp16 or bf16)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, api, layout, storage, fp8 == "all" or (fp8 == "kv" and name != "q"))
    if k.dtype != v.dtype or (fp8 != "kv" and k.dtype != q.dtype):
        raise ValueError(f"q, k and v must share a dtype: got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"q, k and v must be on one device: got {q.device}, {k.device}, {v.device}")
    if layout == DENSE:
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


def check_like(name, t, like, like_name, api, storage=True, layout=DENSE):
    """T must be a tensor the kernels can read, of LIKE's shape, dtype and device."""
    check_tensor(name, t, api, layout, storage)
    if t.shape != like.shape or t.dtype != like.dtype or t.device != like.device:
        raise ValueError(f"{name} is {t.dtype} {tuple(t.shape)} on {t.device}; it must match "
                         f"{like_name}: {like.dtype} {tuple(like.shape)} on {like.device}")


def _check_grad_and_lse(dout, q, lse, lse_shape):
    """dout of q's shape, dtype and device (any strides: it is copied when
    the kernels cannot read it); lse the forward's contiguous fp32 LSE_SHAPE
    on q's device."""
    if not isinstance(dout, torch.Tensor):
        raise TypeError(f"dout must be a torch.Tensor, got {type(dout).__name__}")
    if dout.shape != q.shape or dout.dtype != q.dtype or dout.device != q.device:
        raise ValueError(f"dout is {dout.dtype} {tuple(dout.shape)} on {dout.device}; it must match "
                         f"q: {q.dtype} {tuple(q.shape)} on {q.device}")
    if not isinstance(lse, torch.Tensor):
        raise TypeError(f"lse must be a torch.Tensor, got {type(lse).__name__}")
    if (lse.shape != lse_shape or lse.dtype != torch.float32 or lse.device != q.device
            or not lse.is_contiguous()):
        raise ValueError(f"lse is {lse.dtype} {tuple(lse.shape)} on {lse.device}; it must be the "
                         f"forward's contiguous torch.float32 {lse_shape} on {q.device}")


def check_dlse(dlse, lse, api):
    """DLSE, the gradient through LSE: None, or an fp32 tensor of lse's shape
    on its device (any strides: dlse_layout copies)."""
    if dlse is None:
        return
    if not isinstance(dlse, torch.Tensor):
        raise TypeError(f"dlse must be a torch.Tensor or None, got {type(dlse).__name__}")
    if dlse.shape != lse.shape or dlse.dtype != torch.float32 or dlse.device != lse.device:
        raise ValueError(f"{api}: dlse is {dlse.dtype} {tuple(dlse.shape)} on {dlse.device}; it must be "
                         f"torch.float32 of lse's shape {tuple(lse.shape)} on {lse.device}")


def dlse_layout(dlse):
    """DLSE where libfatune reads it: lse's contiguous layout (a copy where
    it is not: the gradient of lse.sum() is expanded)."""
    return dlse if dlse is None or dlse.is_contiguous() else dlse.contiguous()


def check_bwd(dout, q, k, v, o, lse, api, storage=True):
    """The backward's tensors: q, k, v as the forward's, o like q, dout and
    lse as _check_grad_and_lse, lse (batch, heads, seqlen_q)."""
    check_qkv(q, k, v, api, storage=storage)
    check_like("o", o, q, "q", api, storage)
    b, sq, h, _ = q.shape
    _check_grad_and_lse(dout, q, lse, (b, h, sq))


def check_offsets(name, t, entries, device, api):
    """T must be a contiguous int32 tensor of ENTRIES entries on DEVICE."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.int32 or t.dim() != 1 or t.device != device or t.stride(0) != 1:
        raise ValueError(f"{name} is {t.dtype} {tuple(t.shape)} on {t.device}; {api} takes a "
                         f"contiguous torch.int32 ({entries},) on {device}")
    if t.numel() != entries:
        raise ValueError(f"{name} has {t.numel()} entries; expected {entries}")


def check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, storage=True):
    """attention_varlen's tensors and lengths; returns the batch."""
    api = "fatune.attention_varlen"
    check_qkv(q, k, v, api, PACKED, storage)
    if not isinstance(cu_seqlens_q, torch.Tensor):
        raise TypeError(f"cu_seqlens_q must be a torch.Tensor, got {type(cu_seqlens_q).__name__}")
    if cu_seqlens_q.dim() != 1 or cu_seqlens_q.numel() < 2:
        raise ValueError(f"cu_seqlens_q has shape {tuple(cu_seqlens_q.shape)}; expected (batch + 1,) "
                         "with batch >= 1")
    batch = cu_seqlens_q.numel() - 1
    check_offsets("cu_seqlens_q", cu_seqlens_q, batch + 1, q.device, api)
    check_offsets("cu_seqlens_k", cu_seqlens_k, batch + 1, q.device, api)
    if seqused_k is not None:
        check_offsets("seqused_k", seqused_k, batch, q.device, api)
    for name, x in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if not 1 <= x <= INT_MAX:
            raise ValueError(f"{name} {x} must be 1 .. {INT_MAX}")
    return batch


# ---- the argument blocks -----------------------------------------------------------


def _set_strides(a, name, t):
    if t.dim() == 3:  # packed varlen rows: the batch stride is ignored
        sb, (sr, sh, _) = 0, t.stride()
    else:
        sb, sr, sh, _ = t.stride()
    setattr(a, f"{name}_batch_stride", sb)
    setattr(a, f"{name}_row_stride", sr)
    setattr(a, f"{name}_head_stride", sh)


def _set_options(a, mask, window_left, window_right, softmax_scale, softcap):
    a.mask = mask
    a.window_left, a.window_right = window_left, window_right
    a.softmax_scale = softmax_scale
    a.softcap = softcap


def _dtype_of(q, k):
    """The fat_attn_dtype of checked inputs Q and K: e4m3, an fp8 K/V cache
    (k e4m3 under a 16-bit q), else q's 16-bit type."""
    if is_e4m3(q):
        return _E4M3
    if is_e4m3(k):
        return _KV8[str(q.dtype)]
    return _BF16 if q.dtype == torch.bfloat16 else _FP16


def fwd_args(q, k, v, o, lse, mask, window_left, window_right, softmax_scale, softcap):
    """fat_attn_args of a dense call (o may stand for itself when only the
    shape is read: a selection)."""
    a = _abi.fat_attn_args()
    a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        _set_strides(a, name, t)
    a.batch, a.seqlen_q, a.heads, a.head_dim = q.shape
    a.seqlen_k, a.heads_k = k.shape[1], k.shape[2]
    a.dtype = _dtype_of(q, k)
    _set_options(a, mask, window_left, window_right, softmax_scale, softcap)
    return a


def bwd_args(fwd, dout, dq, dk, dv, deterministic, dlse=None):
    """fat_attn_bwd_args of the forward whose fat_attn_args is FWD; DLSE (in
    dlse_layout) the gradient through lse, or None."""
    a = _abi.fat_attn_bwd_args()
    a.fwd = fwd
    a.dout, a.dq, a.dk, a.dv = dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    for name, t in (("do", dout), ("dq", dq), ("dk", dk), ("dv", dv)):
        _set_strides(a, name, t)
    a.deterministic = 1 if deterministic else 0
    a.dlse = None if dlse is None else dlse.data_ptr()
    return a


# ---- what the operators' implementations allocate ----------------------------------
# One function each for the real and the fake implementation, so that the
# shapes, dtypes and strides of the two cannot differ.


def fwd_outputs(q):
    """out (q's shape, contiguous; bf16 for e4m3 inputs, else q's dtype, an
    fp8 K/V cache's too) and lse (batch, heads, seqlen_q) fp32 of a dense
    forward."""
    b, sq, h, _ = q.shape
    out = (torch.empty(q.shape, dtype=torch.bfloat16, device=q.device) if is_e4m3(q)
           else torch.empty_like(q, memory_format=torch.contiguous_format))
    return out, torch.empty((b, h, sq), dtype=torch.float32, device=q.device)


def varlen_outputs(q):
    """out (total_q, heads, head_dim) and lse (heads, total_q) fp32."""
    total_q, h, _ = q.shape
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty((h, total_q), dtype=torch.float32, device=q.device))


def bwd_outputs(q, k, v):
    """dq, dk, dv in the layouts of q, k, v (their strides where they are
    dense, else contiguous)."""
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


# ---- the launches ----------------------------------------------------------------
# Graph-safe as CUDA graphs need: the launches go to the current stream,
# the workspace comes from torch's caching allocator on it (under capture,
# the graph's private pool), nothing is read back from the device and
# nothing is synchronised. The first call of a problem may open a context,
# read the databases and load a module: warm up before capturing.


def _launch_fwd(a, device, like, api):
    """fat_attention_fwd of ARGS on DEVICE's current stream, with the forward
    workspace the chosen variant needs from the torch caching allocator
    (on LIKE's device)."""
    lib = load()
    ctx = context(device)
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
    st = lib.fat_attention_fwd(ctx, ctypes.byref(a), stream(device), None)
    if st != FAT_OK:
        _raise(lib, ctx, st, api)
    del workspace


# ---- the hot path's memo -------------------------------------------------------
# A dense call's Python checks and its args depend on its tensors' shapes,
# strides, dtypes and devices and on its options, never on their data but
# for its alignment. The first call of a signature runs every check and
# keeps the args it built; a later one checks the alignment, copies the kept
# args and sets the data pointers (libfatune checks every call again all the
# same). Bounded: a decoding loop makes a signature a step.
_MEMO_ENTRIES = 512
_fwd_memo = {}
_bwd_memo = {}


def _remember(memo, key, value):
    if len(memo) >= _MEMO_ENTRIES:
        memo.clear()
    memo[key] = value


def _aligned(*pointers):
    bits = 0
    for p in pointers:
        bits |= p
    return bits % ALIGN_BYTES == 0


def _from_kept(kept, q, qp, kp, vp):
    """A forward's out and lse (fwd_outputs of Q), and a copy of the KEPT
    args with the data pointers QP, KP, VP and theirs."""
    o, lse = fwd_outputs(q)
    a = _abi.fat_attn_args.from_buffer_copy(kept)
    a.q, a.k, a.v, a.o, a.lse = qp, kp, vp, o.data_ptr(), lse.data_ptr()
    return o, lse, a


def forward(q, k, v, mask, window_left, window_right, softmax_scale, softcap):
    """(out, lse) by fat_attention_fwd."""
    key = (q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
           v.shape, v.stride(), v.dtype, v.device, mask, window_left, window_right, softmax_scale, softcap)
    kept = _fwd_memo.get(key)
    qp, kp, vp = q.data_ptr(), k.data_ptr(), v.data_ptr()
    if kept is not None and _aligned(qp, kp, vp):
        o, lse, a = _from_kept(kept, q, qp, kp, vp)
    else:
        check_qkv(q, k, v)
        o, lse = fwd_outputs(q)
        a = fwd_args(q, k, v, o, lse, mask, window_left, window_right, softmax_scale, softcap)
        _remember(_fwd_memo, key, _abi.fat_attn_args.from_buffer_copy(a))
    _launch_fwd(a, device_index(q), q, "fatune.attention")
    return o, lse


def check_descale(name, t, batch, heads_k, device, api="fatune.attention", storage=True):
    """(batch_stride, head_stride) of descale factor T of a (BATCH, HEADS_K)
    call of e4m3 inputs (or an fp8 K/V cache), in fat_attn_args' terms: None (a factor of 1) and a tensor of
    shape () or (1,) (one factor for the tensor) are (0, 0); a (batch,
    heads_k) tensor, FlashAttention-3's layout, its strides. fp32 on the
    inputs' DEVICE (STORAGE False: meta allowed, as check_tensor)."""
    if t is None:
        return 0, 0
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(t).__name__}")
    if t.dtype != torch.float32 or not (t.device == device or (not storage and t.device.type == _SHAPE_ONLY)):
        raise ValueError(f"{name} is {t.dtype} on {t.device}; {api} takes torch.float32 descale "
                         f"factors on {device}")
    if t.dim() == 0 or tuple(t.shape) == (1,):
        return 0, 0
    if tuple(t.shape) != (batch, heads_k):
        raise ValueError(f"{name} has shape {tuple(t.shape)}; {api} takes () or (1,) (one factor) or "
                         f"(batch, heads_k) = {(batch, heads_k)}")
    return t.stride(0), t.stride(1)


def check_q_descale(q, q_descale, api):
    """An fp8 K/V cache's q is 16-bit: no descale factor of its own."""
    if q_descale is not None:
        raise ValueError(f"{api}: q_descale given with {q.dtype} q: q takes no descale factor (only an "
                         "fp8 q does; an fp8 K/V cache's factors are k_descale and v_descale); pass None")


def check_fp8(q, k, v, q_descale, k_descale, v_descale, api="fatune.attention", storage=True):
    """q, k, v of an fp8 forward -- e4m3 inputs, or an fp8 K/V cache (k and
    v e4m3 under an fp16 or bf16 q, which takes no q_descale) -- and their
    descale factors: ((batch stride, head stride) of each factor)."""
    kind = fp8_kind(q, k, v, api)
    if kind is None:
        raise ValueError(f"{api}: q, k and v are {q.dtype}, {k.dtype}, {v.dtype}: the fp8 forward takes "
                         "torch.float8_e4m3fn k and v (and q)")
    if kind == "kv":
        check_q_descale(q, q_descale, api)
    check_qkv(q, k, v, api, storage=storage, fp8=kind)
    b, hk = q.shape[0], k.shape[2]
    return tuple(check_descale(name, t, b, hk, q.device, api, storage)
                 for name, t in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)))


def forward_fp8(q, k, v, q_descale, k_descale, v_descale, mask, window_left, window_right, softmax_scale,
                softcap):
    """(out, lse) of fp8 inputs by fat_attention_fwd, each e4m3 value
    standing for itself times its tensor's descale factor: out bf16 for
    e4m3 q, k and v, q's type for an fp8 K/V cache."""
    strides = check_fp8(q, k, v, q_descale, k_descale, v_descale)
    o, lse = fwd_outputs(q)
    a = fwd_args(q, k, v, o, lse, mask, window_left, window_right, softmax_scale, softcap)
    _set_descales(a, (q_descale, k_descale, v_descale), strides)
    _launch_fwd(a, device_index(q), q, "fatune.attention")
    return o, lse


def _set_descales(a, factors, strides):
    """fat_attn_args' q, k and v descale factors (None: NULL, a factor of
    1) and their strides (check_descale's)."""
    for name, t, (sb, sh) in zip("qkv", factors, strides):
        setattr(a, f"{name}_descale", t.data_ptr() if t is not None else None)
        setattr(a, f"{name}_descale_batch_stride", sb)
        setattr(a, f"{name}_descale_head_stride", sh)


def varlen_args(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, mask,
                window_left, window_right, softmax_scale, softcap):
    """fat_attn_args of a packed batch (checked: check_varlen)."""
    batch = cu_seqlens_q.numel() - 1
    total_q, h, _ = q.shape
    a = _abi.fat_attn_args()
    a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        _set_strides(a, name, t)
    a.batch, a.heads, a.heads_k, a.head_dim = batch, h, k.shape[1], q.shape[2]
    a.seqlen_q, a.seqlen_k = max_seqlen_q, max_seqlen_k
    a.total_q, a.total_k = total_q, k.shape[0]
    a.cu_seqlens_q, a.cu_seqlens_k = cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr()
    a.seqused_k = seqused_k.data_ptr() if seqused_k is not None else None
    a.dtype = _dtype_of(q, k)
    _set_options(a, mask, window_left, window_right, softmax_scale, softcap)
    return a


def forward_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, mask,
                   window_left, window_right, softmax_scale, softcap):
    """(out, lse) of a packed batch by fat_attention_fwd."""
    check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k)
    o, lse = varlen_outputs(q)
    a = varlen_args(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, mask,
                    window_left, window_right, softmax_scale, softcap)
    _launch_fwd(a, device_index(q), q, "fatune.attention_varlen")
    return o, lse


def _launch_bwd(a, q, api, need=None):
    """fat_attention_bwd of ARGS on Q's device's current stream, with its
    workspace from the torch caching allocator: NEED bytes, asked of
    libfatune when None (they depend on the shape and on deterministic
    alone: fat_attention_bwd_workspace). Returns the bytes."""
    lib = load()
    device = device_index(q)
    ctx = context(device)
    if need is None:
        asked = ctypes.c_size_t()
        st = lib.fat_attention_bwd_workspace(ctx, ctypes.byref(a), ctypes.byref(asked))
        if st != FAT_OK:
            _raise(lib, ctx, st, api)
        need = asked.value
    # From the caching allocator on the current stream, which the launch uses:
    # freed on return, it is reused only by work queued after the backward's.
    workspace = torch.empty(max(need, 1), dtype=torch.uint8, device=q.device)
    a.workspace, a.workspace_bytes = workspace.data_ptr(), need
    st = lib.fat_attention_bwd(ctx, ctypes.byref(a), stream(device), None)
    if st != FAT_OK:
        _raise(lib, ctx, st, api)
    return need


def backward(dout, q, k, v, o, lse, mask, window_left, window_right, softmax_scale, softcap, deterministic,
             dq=None, dk=None, dv=None, api="fatune.attention", dlse=None):
    """fat_attention_bwd: the gradients DQ, DK, DV (written where given,
    already checked, else allocated by bwd_outputs) of the forward of q, k, v
    that gave O and LSE, for DOUT (copied when the kernels cannot read it)
    and DLSE, the gradient through lse (None: none; copied when not
    contiguous)."""
    options = (mask, window_left, window_right, softmax_scale, softcap, deterministic)
    allocate = dq is None and dk is None and dv is None
    if allocate:  # the operators' call: the memo (forward's, above)
        key = (dout.shape, dout.stride(), dout.dtype, dout.device, q.shape, q.stride(), q.dtype, q.device,
               k.shape, k.stride(), k.dtype, k.device, v.shape, v.stride(), v.dtype, v.device,
               o.shape, o.stride(), o.dtype, o.device, lse.shape, lse.stride(), lse.dtype, lse.device,
               api, dlse is None or (dlse.shape, dlse.dtype, dlse.device)) + options
        kept = _bwd_memo.get(key)
        ptrs = (dout.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr())
        if kept is not None and _aligned(*ptrs):
            proto, copy_dout, need = kept
            if copy_dout:
                dout = dout.clone(memory_format=torch.contiguous_format)
            dlse = dlse_layout(dlse)
            dq, dk, dv = bwd_outputs(q, k, v)
            a = _abi.fat_attn_bwd_args.from_buffer_copy(proto)
            f = a.fwd
            f.q, f.k, f.v, f.o, f.lse = ptrs[1], ptrs[2], ptrs[3], ptrs[4], lse.data_ptr()
            a.dout, a.dq, a.dk, a.dv = dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
            a.dlse = None if dlse is None else dlse.data_ptr()
            _launch_bwd(a, q, api, need)
            return dq, dk, dv
    check_bwd(dout, q, k, v, o, lse, api)
    check_dlse(dlse, lse, api)
    given = dout
    dout = kernel_layout(dout)
    dlse = dlse_layout(dlse)
    if allocate:
        dq, dk, dv = bwd_outputs(q, k, v)
    else:  # the raw attention_bwd's: those not given, as bwd_outputs makes them
        dq, dk, dv = (torch.empty_like(t) if g is None else g for g, t in ((dq, q), (dk, k), (dv, v)))
    fwd = fwd_args(q, k, v, o, lse, mask, window_left, window_right, softmax_scale, softcap)
    a = bwd_args(fwd, dout, dq, dk, dv, deterministic, dlse)
    proto = _abi.fat_attn_bwd_args.from_buffer_copy(a) if allocate else None
    need = _launch_bwd(a, q, api)
    if allocate:  # once launched
        _remember(_bwd_memo, key, (proto, dout is not given, need))
    return dq, dk, dv


def check_bwd_varlen(dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                     storage=True):
    """The packed backward's tensors: the forward's (check_varlen), o like q,
    dout and lse as _check_grad_and_lse, lse (heads, total_q)."""
    api = "fatune.attention_varlen"
    check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, storage)
    check_like("o", o, q, "q", api, storage, PACKED)
    total_q, h, _ = q.shape
    _check_grad_and_lse(dout, q, lse, (h, total_q))


def backward_varlen(dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                    mask, window_left, window_right, softmax_scale, softcap, deterministic, dlse=None):
    """fat_attention_bwd of a packed batch: (dq, dk, dv) like q, k, v; DLSE
    as backward's, (heads, total_q) as lse."""
    api = "fatune.attention_varlen"
    check_bwd_varlen(dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k)
    check_dlse(dlse, lse, api)
    dout = kernel_layout(dout)
    dq, dk, dv = bwd_outputs(q, k, v)
    fwd = varlen_args(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, mask,
                      window_left, window_right, softmax_scale, softcap)
    _launch_bwd(bwd_args(fwd, dout, dq, dk, dv, deterministic, dlse_layout(dlse)), q, api)
    return dq, dk, dv


# ---- the KV-cache call (flash_attn_with_kvcache) -------------------------------------

KVCACHE_API = "fatune.attention_with_kvcache"
CACHE = "(batch, seqlen_cache, heads_k, head_dim)"
PAGES = "(num_blocks, page_block_size, heads_k, head_dim)"


def check_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, storage=True, fp8=False):
    """attention_with_kvcache's tensors: q dense, k_cache and v_cache a
    contiguous cache of q's batch or, with block_table ((batch, max_blocks)
    int32, last dimension contiguous), a pool of pages; cache_seqlens None or
    int32 (batch,). FP8: an fp8 K/V cache, k_cache and v_cache
    torch.float8_e4m3fn under an fp16 or bf16 q. Returns seqlen_k: the
    cache's length, or max_blocks x page_block_size (the table's reach)."""
    api = KVCACHE_API
    kind = fp8_kind(q, k_cache, v_cache, api, ("q", "k_cache", "v_cache"))
    if kind == "all":
        raise ValueError(f"{api}: q is {q.dtype}: an fp8 K/V cache takes a torch.float16 or "
                         "torch.bfloat16 q (fp8 q, k and v are fatune.attention's e4m3 forward)")
    if fp8 != (kind == "kv"):  # the operator called directly with the other kind of cache
        raise ValueError(f"{api}: k_cache and v_cache are {k_cache.dtype}: "
                         + ("fatune::fwd_kvcache_fp8 takes torch.float8_e4m3fn caches" if fp8 else
                            "an fp8 cache is fatune::fwd_kvcache_fp8's, with its descale factors"))
    check_tensor("q", q, api, DENSE, storage)
    paged = block_table is not None
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        check_tensor(name, t, api, PAGES if paged else CACHE, storage, fp8)
    if fp8 and k_cache.dtype != v_cache.dtype:  # not reached: fp8_kind's "kv" has both e4m3
        raise ValueError(f"k_cache and v_cache must share a dtype: got {k_cache.dtype}, {v_cache.dtype}")
    if not fp8 and (k_cache.dtype != q.dtype or v_cache.dtype != q.dtype):
        raise ValueError(f"q, k_cache and v_cache must share a dtype: got {q.dtype}, {k_cache.dtype}, "
                         f"{v_cache.dtype}")
    if k_cache.device != q.device or v_cache.device != q.device:
        raise ValueError(f"q, k_cache and v_cache must be on one device: got {q.device}, "
                         f"{k_cache.device}, {v_cache.device}")
    if k_cache.shape != v_cache.shape or k_cache.shape[3] != q.shape[3]:
        raise ValueError(f"shapes q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}, v_cache "
                         f"{tuple(v_cache.shape)}: the caches must match, with q's head_dim")
    if q.shape[2] % k_cache.shape[2]:
        raise ValueError(f"k/v heads {k_cache.shape[2]} do not divide q heads {q.shape[2]}")
    batch = q.shape[0]
    if paged:
        if not isinstance(block_table, torch.Tensor):
            raise TypeError(f"block_table must be a torch.Tensor, got {type(block_table).__name__}")
        if (block_table.dtype != torch.int32 or block_table.dim() != 2 or block_table.device != q.device
                or block_table.shape[0] != batch or block_table.stride(1) != 1):
            raise ValueError(f"block_table is {block_table.dtype} {tuple(block_table.shape)} on "
                             f"{block_table.device}; {api} takes a torch.int32 (batch, max_blocks) on "
                             f"{q.device} whose last dimension is contiguous, batch {batch}")
        seqlen_k = block_table.shape[1] * k_cache.shape[1]
    else:
        if k_cache.shape[0] != batch:
            raise ValueError(f"k_cache has batch {k_cache.shape[0]}; q has {batch}")
        seqlen_k = k_cache.shape[1]
    if cache_seqlens is not None:
        check_offsets("cache_seqlens", cache_seqlens, batch, q.device, api)
    if not 1 <= seqlen_k <= INT_MAX:
        raise ValueError(f"the cache holds {seqlen_k} keys; {api} takes 1 .. {INT_MAX}")
    return seqlen_k


def kvcache_args(q, k_cache, v_cache, o, lse, cache_seqlens, block_table, mask, window_left, window_right,
                 softmax_scale, softcap):
    """fat_attn_args of a KV-cache call (checked: check_kvcache): seqused_k
    the cache lengths, and for a paged cache the block table, its row
    length, the page size and the pool's pages (k and v's batch strides the
    page's)."""
    a = fwd_args(q, k_cache, v_cache, o, lse, mask, window_left, window_right, softmax_scale, softcap)
    a.seqused_k = cache_seqlens.data_ptr() if cache_seqlens is not None else None
    if block_table is not None:
        a.seqlen_k = block_table.shape[1] * k_cache.shape[1]
        a.block_table = block_table.data_ptr()
        a.block_table_stride = block_table.stride(0)
        a.page_size = k_cache.shape[1]
        a.num_pages = k_cache.shape[0]
    return a


_kvcache_memo = {}


def forward_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, mask, window_left, window_right,
                    softmax_scale, softcap):
    """(out, lse) of a KV-cache call by fat_attention_fwd. Memoised as
    forward is (a decoding loop's steps share a signature: the lengths move
    in cache_seqlens' data, not its shape)."""
    key = [mask, window_left, window_right, softmax_scale, softcap]
    for t in (q, k_cache, v_cache, cache_seqlens, block_table):
        key += (None,) if t is None else (t.shape, t.stride(), t.dtype, t.device)
    key = tuple(key)
    kept = _kvcache_memo.get(key)
    qp, kp, vp = q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr()
    if kept is not None and _aligned(qp, kp, vp):
        o, lse, a = _from_kept(kept, q, qp, kp, vp)
        if cache_seqlens is not None:
            a.seqused_k = cache_seqlens.data_ptr()
        if block_table is not None:
            a.block_table = block_table.data_ptr()
    else:
        check_kvcache(q, k_cache, v_cache, cache_seqlens, block_table)
        o, lse = fwd_outputs(q)
        a = kvcache_args(q, k_cache, v_cache, o, lse, cache_seqlens, block_table, mask, window_left,
                         window_right, softmax_scale, softcap)
        _remember(_kvcache_memo, key, _abi.fat_attn_args.from_buffer_copy(a))
    _launch_fwd(a, device_index(q), q, KVCACHE_API)
    return o, lse


def check_kvcache_fp8(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, storage=True):
    """An fp8 K/V cache's call (check_kvcache's, FP8) and its descale
    factors: ((batch stride, head stride) of k's and of v's)."""
    check_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, storage, fp8=True)
    b, hk = q.shape[0], k_cache.shape[2]
    return tuple(check_descale(name, t, b, hk, q.device, KVCACHE_API, storage)
                 for name, t in (("k_descale", k_descale), ("v_descale", v_descale)))


def forward_kvcache_fp8(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, mask,
                        window_left, window_right, softmax_scale, softcap):
    """(out in q's type, lse) of a call over an fp8 K/V cache by
    fat_attention_fwd: each cached value stands for itself times its
    tensor's descale factor."""
    k_strides, v_strides = check_kvcache_fp8(q, k_cache, v_cache, cache_seqlens, block_table, k_descale,
                                             v_descale)
    o, lse = fwd_outputs(q)
    a = kvcache_args(q, k_cache, v_cache, o, lse, cache_seqlens, block_table, mask, window_left, window_right,
                     softmax_scale, softcap)
    _set_descales(a, (None, k_descale, v_descale), ((0, 0), k_strides, v_strides))
    _launch_fwd(a, device_index(q), q, KVCACHE_API)
    return o, lse


# ---- selection and the last choice --------------------------------------------------


def select(q, k, v, mask, window_left, window_right, softcap, bwd=False, deterministic=False):
    """The Choice a forward (BWD: a backward) launch would make, without launching."""
    api = "fatune.select_bwd" if bwd else "fatune.select"
    check_qkv(q, k, v, api, fp8=None if bwd else fp8_kind(q, k, v, api))
    lib = load()
    ctx = context(device_index(q))
    lse = torch.empty(1, device=q.device)  # only the shape is read
    a = fwd_args(q, k, v, q, lse, mask, window_left, window_right, 0.0, softcap)
    if bwd:
        a, fn = bwd_args(a, q, q, k, v, deterministic), lib.fat_attention_bwd_select
    else:
        fn = lib.fat_attention_select
    c = _abi.fat_choice()
    st = fn(ctx, ctypes.byref(a), ctypes.byref(c))
    if st != FAT_OK:
        raise ValueError(f"{api}: {lib.fat_context_error(ctx).decode()}")
    return Choice(lib, c)


def last_choice(device):
    lib = load()
    ctx = context(device)
    c = _abi.fat_choice()
    st = lib.fat_context_last_choice(ctx, ctypes.byref(c))
    if st != FAT_OK:
        raise FatuneError(st, lib.fat_context_error(ctx).decode())
    return Choice(lib, c)
