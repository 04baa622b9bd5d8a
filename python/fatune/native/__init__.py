# SPDX-License-Identifier: MIT
"""fatune.attention's host path in C++ (csrc/native.cpp): built once per
machine against the torch that runs it, then used by every eager call it
takes; without it the Python path runs, with the same results.

    python -m fatune.native build     # compile it (a C++ compiler, ninja;
                                      # about a minute), then use it
    python -m fatune.native           # say whether it is built and used

The module is named after a hash of its source, libfatune's header, the
torch version and the Python version, so a build never serves another
torch or another fatune: after an upgrade `import fatune` finds none and
runs the Python path until it is built again. It lives under
$FATUNE_NATIVE_DIR, else $XDG_CACHE_HOME/fatune/native, else
~/.cache/fatune/native. FATUNE_NATIVE=0 keeps it unused; FATUNE_NATIVE=build
builds it at the first import that finds none.

What it takes is the dense forward of 16-bit tensors the kernels read as
they lie, with its autograd node (a torch::autograd::Function, so the
backward runs without the interpreter); everything else, and everything it
declines (a device whose context is not open yet, any status but FAT_OK),
runs the Python path, which gives every error."""
import hashlib
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the fatune package
SOURCE = os.path.join(_HERE, "csrc", "native.cpp")


def include_dir():
    """The folder of fatune.h: inside the package (a wheel), else the
    checkout's include/."""
    for d in (os.path.join(_HERE, "include"), os.path.join(_HERE, "..", "..", "include")):
        if os.path.exists(os.path.join(d, "fatune.h")):
            return os.path.normpath(d)
    raise FileNotFoundError(f"fatune.h is neither in {os.path.join(_HERE, 'include')} nor in the "
                            "checkout's include/: the native path cannot be built")


def module_name():
    """fatune_native_ and 16 hex digits of the hash of what the build
    depends on."""
    import torch
    h = hashlib.sha256()
    for path in (SOURCE, os.path.join(include_dir(), "fatune.h")):
        with open(path, "rb") as f:
            h.update(f.read())
    h.update(f"{torch.__version__} {torch.version.cuda} {sys.version_info[:2]}".encode())
    return "fatune_native_" + h.hexdigest()[:16]


def build_dir(name=None):
    """The module's folder; NAME: module_name(), when the caller has it."""
    root = os.environ.get("FATUNE_NATIVE_DIR")
    if not root:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(cache, "fatune", "native")
    return os.path.join(root, name or module_name())


def module_path(name=None):
    name = name or module_name()
    return os.path.join(build_dir(name), name + ".so")


def build(verbose=False):
    """Compiles the module (torch.utils.cpp_extension, with torch's CUDA
    headers) unless it is built; returns its path."""
    from torch.utils import cpp_extension
    name = module_name()  # hashes the source and the header: once
    path = module_path(name)
    if not os.path.exists(path):
        os.makedirs(build_dir(name), exist_ok=True)
        # No CUDA source is compiled, but torch asks for architectures all the
        # same, and finds none on a machine without a GPU.
        unset = "TORCH_CUDA_ARCH_LIST" not in os.environ
        if unset:
            os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
        try:
            cpp_extension.load(name=name, sources=[SOURCE], extra_include_paths=[include_dir()],
                               extra_cflags=["-O2"], build_directory=build_dir(name), with_cuda=True,
                               verbose=verbose)
        finally:
            if unset:
                del os.environ["TORCH_CUDA_ARCH_LIST"]
    if not os.path.exists(path):
        raise OSError(f"the native path's build left no {path}")
    return path


def _import(path):
    name = os.path.basename(path)[:-len(".so")]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load():
    """The built module, bound to the binding's libfatune, or None: not
    built (and FATUNE_NATIVE is not "build"), FATUNE_NATIVE=0, or no torch."""
    want = os.environ.get("FATUNE_NATIVE", "1")
    if want == "0":
        return None
    try:
        path = build() if want == "build" else module_path()
    except ImportError:  # no torch
        return None
    if not os.path.exists(path):
        return None
    from .. import _runtime
    module = _import(path)
    module.bind(_runtime.load()._handle, _runtime.backward)
    _runtime.on_context_open(module.set_context)
    return module


def _main(argv):
    if argv[:1] == ["build"]:
        print(build(verbose="-v" in argv))
    elif argv:
        print("usage: python -m fatune.native [build [-v]]", file=sys.stderr)
        return 2
    path = module_path()
    if not os.path.exists(path):
        state = "not built: python -m fatune.native build"
    elif os.environ.get("FATUNE_NATIVE") == "0":
        state = "built, not used (FATUNE_NATIVE=0)"
    else:
        state = "built, used"
    print(f"{path}: {state}")
    return 0

