# SPDX-License-Identifier: MIT
"""An installed fatune wheel, on a machine without a GPU (CI's wheel step):
run from outside the source tree by the interpreter of the environment the
wheel went into. It checks that `import fatune` takes the installed package
(not a checkout), that the binding loads the libfatune inside it
(fatune/lib/libfatune.so) with FATUNE_LIB unset, and that a selection for an
offline GPU (an NVIDIA H200 described by name, compute capability and SM
count: no device, no driver needed) is served by the shipped tables the
wheel carries beside the library, from the exact bucket of a tuned problem,
and that the native host path's source and libfatune's header are inside
the package.
Needs no PyTorch. Prints one line a check and exits 1 at the first failure.

    python -m venv /tmp/v && /tmp/v/bin/pip install fatune-*.whl
    cd /tmp && /tmp/v/bin/python /path/to/python/tests/wheel_smoke.py
"""
import ctypes
import os
import sys


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        sys.exit(1)


def main():
    os.environ.pop("FATUNE_LIB", None)
    import fatune
    from fatune import _abi, _runtime

    here = os.path.dirname(os.path.abspath(fatune.__file__))
    check("site-packages" in here or "dist-packages" in here, f"fatune imported from the installed package ({here})")
    check(_runtime.library_path() == _runtime.PACKAGE_LIB and os.path.isfile(_runtime.PACKAGE_LIB),
          f"the library inside the package: {_runtime.library_path()}")
    lib = _runtime.load()
    check(lib.fat_version_string().decode() == "%d.%d.%d" % _abi.VERSION,
          f"libfatune {lib.fat_version_string().decode()} loads")
    ctx = ctypes.c_void_p()
    opts = _abi.fat_context_options(gpu_name=b"NVIDIA H200", gpu_cc_major=9, gpu_cc_minor=0, gpu_sm_count=132)
    st = lib.fat_context_open(ctypes.byref(ctx), ctypes.byref(opts))
    check(st == _runtime.FAT_OK, f"an offline context for the H200: {lib.fat_context_error(ctx).decode()}")
    # A tuned problem: bf16, causal, head dim 128, 4096 queries and keys, 16
    # heads; pointers only need to be non-null and aligned offline.
    a = _abi.fat_attn_args()
    a.q = a.k = a.v = a.o = a.lse = 1 << 20
    a.batch, a.seqlen_q, a.seqlen_k, a.heads, a.heads_k, a.head_dim = 4, 4096, 4096, 16, 16, 128
    a.dtype, a.mask = _abi.DTYPE["FAT_ATTN_BF16"], _abi.MASK["FAT_ATTN_MASK_CAUSAL"]
    lib.fat_attn_args_contiguous(ctypes.byref(a))
    c = _abi.fat_choice()
    st = lib.fat_attention_select(ctx, ctypes.byref(a), ctypes.byref(c))
    check(st == _runtime.FAT_OK, f"fat_attention_select: {lib.fat_context_error(ctx).decode()}")
    choice = _runtime.Choice(lib, c)
    check(choice.origin == "shipped tables" and choice.match == "exact bucket"
          and os.path.dirname(choice.db_path) == os.path.dirname(_runtime.PACKAGE_LIB),
          f"served by the wheel's tables: {choice} from {choice.db_path}")
    lib.fat_context_close(ctx)
    # What `python -m fatune.native build` compiles, inside the package (it
    # needs torch to build, not to be found).
    from fatune import native
    check(os.path.isfile(native.SOURCE) and native.SOURCE.startswith(here),
          f"the native host path's source in the package: {native.SOURCE}")
    check(native.include_dir() == os.path.join(here, "include"),
          f"libfatune's header in the package: {native.include_dir()}")
    print("wheel smoke: 8 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
