# SPDX-License-Identifier: MIT
"""The C ABI of include/fatune.h in ctypes: its structs, the enum values the
binding passes or reads, and the prototypes of its functions. Kept apart from
the binding so that it imports without PyTorch or libfatune:
python/tests/test_struct_layout.py compiles a C program against the header
and compares every struct's size, alignment and field offsets, every enum
value, and the name and argument count of every function with what is
declared here.

The classes carry the C names, so the test finds each one's C twin by name.
"""
import ctypes

# The library this mirror is of: its soname (FATUNE_SOVERSION in
# CMakeLists.txt) and the header version whose structs are declared here.
SONAME = "libfatune.so.4"
VERSION = (0, 6, 0)

# enum fat_status.
STATUS = {
    "FAT_OK": 0, "FAT_ERR_INVALID_ARGUMENT": 1, "FAT_ERR_UNSUPPORTED": 2, "FAT_ERR_NO_DRIVER": 3,
    "FAT_ERR_CUDA": 4, "FAT_ERR_NO_NVRTC": 5, "FAT_ERR_COMPILE": 6, "FAT_ERR_DATABASE": 7,
    "FAT_ERR_OUT_OF_MEMORY": 8, "FAT_ERR_INTEGRITY": 9,
}
DTYPE = {"FAT_ATTN_FP16": 0, "FAT_ATTN_BF16": 1, "FAT_ATTN_E4M3": 2,  # enum fat_attn_dtype
         "FAT_ATTN_FP16_E4M3KV": 3, "FAT_ATTN_BF16_E4M3KV": 4}
MASK = {"FAT_ATTN_MASK_NONE": 0, "FAT_ATTN_MASK_CAUSAL": 1, "FAT_ATTN_MASK_LOCAL": 2}  # enum fat_attn_mask
ENUMS = {"fat_status": STATUS, "fat_attn_dtype": DTYPE, "fat_attn_mask": MASK}

_STRIDES = ("batch", "row", "head")


class _Sized(ctypes.Structure):
    """A public struct: struct_size, its first field, is set to ctypes'
    sizeof on construction (the C header's _INIT macros), as libfatune
    requires; nested public structs get theirs the same way."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.struct_size = ctypes.sizeof(self)
        for name, kind in self._fields_:
            if isinstance(kind, type) and issubclass(kind, _Sized) and name not in kwargs:
                getattr(self, name).struct_size = ctypes.sizeof(kind)


_SIZE = ("struct_size", ctypes.c_size_t)


class fat_attn_args(_Sized):
    _fields_ = [_SIZE, ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p)] + [
        (f"{t}_{s}_stride", ctypes.c_longlong) for t in ("q", "k", "v", "o") for s in _STRIDES] + [
        ("batch", ctypes.c_int), ("heads", ctypes.c_int), ("heads_k", ctypes.c_int),
        ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int), ("head_dim", ctypes.c_int),
        ("dtype", ctypes.c_int), ("mask", ctypes.c_int), ("softmax_scale", ctypes.c_float),
        ("window_left", ctypes.c_int), ("window_right", ctypes.c_int), ("softcap", ctypes.c_float),
        # Device int32 arrays (varlen offsets, used keys per sequence), or NULL.
        ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
        ("seqused_k", ctypes.c_void_p), ("total_q", ctypes.c_int), ("total_k", ctypes.c_int),
        ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t),
        # A paged K/V cache: device int32 (batch, block_table_stride) page indices, or NULL.
        ("block_table", ctypes.c_void_p), ("block_table_stride", ctypes.c_int),
        ("page_size", ctypes.c_int), ("num_pages", ctypes.c_int),
        # e4m3 inputs: device fp32 descale factors of q, k, v (NULL: 1), indexed
        # by (batch, key head) through their strides (0, 0: one per tensor).
        ("q_descale", ctypes.c_void_p), ("k_descale", ctypes.c_void_p),
        ("v_descale", ctypes.c_void_p)] + [
        (f"{t}_descale_{s}_stride", ctypes.c_int) for t in ("q", "k", "v") for s in ("batch", "head")]


class fat_attn_bwd_args(_Sized):
    _fields_ = [_SIZE, ("fwd", fat_attn_args), ("dout", ctypes.c_void_p), ("dq", ctypes.c_void_p),
                ("dk", ctypes.c_void_p), ("dv", ctypes.c_void_p)] + [
        (f"{t}_{s}_stride", ctypes.c_longlong) for t in ("do", "dq", "dk", "dv") for s in _STRIDES] + [
        ("deterministic", ctypes.c_int), ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t), ("dlse", ctypes.c_void_p)]


class fat_choice(_Sized):
    _fields_ = [_SIZE, ("variant", ctypes.c_char * 128), ("source_hash", ctypes.c_char * 65),
                ("origin", ctypes.c_int), ("match", ctypes.c_int), ("bucket_seqlen", ctypes.c_int),
                ("bucket_seqlen_k", ctypes.c_int), ("bucket_group", ctypes.c_int),
                ("bucket_window_left", ctypes.c_int), ("bucket_window_right", ctypes.c_int),
                ("bucket_page_size", ctypes.c_int), ("tuned_ms", ctypes.c_double), ("loaded", ctypes.c_int), ("load", ctypes.c_int),
                ("db_path", ctypes.c_char * 512), ("note", ctypes.c_char * 256)]


class fat_context_options(_Sized):
    _fields_ = [_SIZE, ("device", ctypes.c_int), ("user_db", ctypes.c_char_p),
                ("tables", ctypes.POINTER(ctypes.c_char_p)), ("n_tables", ctypes.c_int),
                ("no_builtin", ctypes.c_int), ("gpu_name", ctypes.c_char_p),
                ("gpu_cc_major", ctypes.c_int), ("gpu_cc_minor", ctypes.c_int),
                ("gpu_sm_count", ctypes.c_int)]


STRUCTS = (fat_attn_args, fat_attn_bwd_args, fat_choice, fat_context_options)


_P, _vp, _i = ctypes.POINTER, ctypes.c_void_p, ctypes.c_int
# name: (restype, argtypes) of every FAT_API function; the context is an
# opaque pointer, a stream a CUstream (void *).
PROTOTYPES = {
    "fat_version_number": (ctypes.c_uint, []),
    "fat_version_string": (ctypes.c_char_p, []),
    "fat_strerror": (ctypes.c_char_p, [_i]),
    "fat_attn_args_contiguous": (None, [_P(fat_attn_args)]),
    "fat_context_open": (_i, [_P(_vp), _P(fat_context_options)]),
    "fat_context_close": (None, [_vp]),
    "fat_context_error": (ctypes.c_char_p, [_vp]),
    "fat_attention_select": (_i, [_vp, _P(fat_attn_args), _P(fat_choice)]),
    "fat_attention_check": (_i, [_vp, _P(fat_attn_args)]),
    "fat_verify_cubin": (_i, [_vp, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p,
                              ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    "fat_attention_fwd_workspace": (_i, [_vp, _P(fat_attn_args), _P(ctypes.c_size_t)]),
    "fat_attention_fwd": (_i, [_vp, _P(fat_attn_args), _vp, _P(fat_choice)]),
    "fat_attn_bwd_args_contiguous": (None, [_P(fat_attn_bwd_args)]),
    "fat_attention_bwd_workspace": (_i, [_vp, _P(fat_attn_bwd_args), _P(ctypes.c_size_t)]),
    "fat_attention_bwd_select": (_i, [_vp, _P(fat_attn_bwd_args), _P(fat_choice)]),
    "fat_attention_bwd_check": (_i, [_vp, _P(fat_attn_bwd_args)]),
    "fat_attention_bwd": (_i, [_vp, _P(fat_attn_bwd_args), _vp, _P(fat_choice)]),
    "fat_context_last_choice": (_i, [_vp, _P(fat_choice)]),
    "fat_supported_head_dims": (_i, [_P(_i), _i]),
    "fat_origin_name": (ctypes.c_char_p, [_i]),
    "fat_match_name": (ctypes.c_char_p, [_i]),
    "fat_load_name": (ctypes.c_char_p, [_i]),
}


def declare(lib):
    """Sets the prototypes of LIB's fat_* functions (a ctypes.CDLL of libfatune).
    Every one must be there: the binding and the library ship together."""
    for name, (restype, argtypes) in PROTOTYPES.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = restype, argtypes
