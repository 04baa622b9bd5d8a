# SPDX-License-Identifier: MIT
"""The native host path (python/fatune/native/) on the CPU: it builds
against the torch here, loads and binds to the binding's libfatune; its
forward and its KV-cache call decline what they do not take (CPU and
meta tensors, fp32, a device with no context: all of them here), so
fatune.attention's answers
are the Python path's; bind refuses a library without libfatune's calls by
name; FATUNE_NATIVE=0 leaves it unused; `python -m fatune.native` says
where it is. The launches need a GPU: python/tests/test_gpu_native.py.
Needs PyTorch, ninja and a C++ compiler: skipped (exit 77 as a script)
without. The build takes about a minute.

    python3 -m pytest python/tests/test_native.py
    python3 python/tests/test_native.py
"""
import ctypes
import ctypes.util
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import script_tests  # noqa: E402
os.environ.setdefault("FATUNE_NATIVE_DIR", tempfile.mkdtemp(prefix="fatune-native-"))
try:
    import torch
except ImportError:
    torch = None
try:
    import pytest
except ImportError:
    pytest = None
import fatune  # noqa: E402
from fatune import native  # noqa: E402

MISSING = ("no PyTorch" if torch is None else "no ninja" if shutil.which("ninja") is None
           else "no C++ compiler" if shutil.which(os.environ.get("CXX", "c++")) is None else None)
if pytest is not None:
    pytestmark = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))

_built = []


def built():
    """The module, built once for this process, bound to libfatune."""
    if not _built:
        native.build()
        module = native.load()
        assert module is not None, "built, yet load() found none"
        _built.append(module)
    return _built[0]


def test_declines_here():
    m = built()
    q = torch.randn(1, 64, 4, 64, dtype=torch.bfloat16)
    for t in (q, q.to("meta"), q.float()):
        assert m.fwd(t, t, t, 0, -1, -1, 0.125, 0.0, False) == [], t.device
        assert m.fwd_kvcache(t, t, t, None, None, 0, -1, -1, 0.125, 0.0) == [], t.device
    lengths = torch.full((1,), 64, dtype=torch.int32)
    assert m.fwd_kvcache(q, q, q, lengths, None, 0, -1, -1, 0.125, 0.0) == []
    # the Python path's refusal, as without the module
    try:
        fatune.attention(q, q, q)
    except ValueError as e:
        assert "cpu" in str(e) and "CUDA" in str(e), e
    else:
        raise AssertionError("fatune.attention took CPU tensors")


def test_module_named_by_what_it_depends_on():
    name = native.module_name()
    assert name.startswith("fatune_native_") and len(name) == len("fatune_native_") + 16
    assert native.module_path().endswith(os.path.join(name, name + ".so"))
    assert native.module_name() == name
    kept = torch.__version__
    torch.__version__ = kept + "+another"
    try:
        assert native.module_name() != name, "a build for another torch would be loaded"
    finally:
        torch.__version__ = kept


def test_bind_refuses_another_library():
    m = built()
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    try:
        m.bind(libc._handle, lambda *a: None)
    except RuntimeError as e:
        assert "libfatune has no fat_attention_fwd_workspace" in str(e), e
    else:
        raise AssertionError("bind took libc for libfatune")
    from fatune import _runtime
    m.bind(_runtime.load()._handle, _runtime.backward)  # the binding's again


def test_unused_when_off():
    built()
    os.environ["FATUNE_NATIVE"] = "0"
    try:
        assert native.load() is None
    finally:
        del os.environ["FATUNE_NATIVE"]


def test_command_says_where():
    built()
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    out = subprocess.run([sys.executable, "-m", "fatune.native"], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert native.module_path() in out and "built, used" in out, out
    env["FATUNE_NATIVE"] = "0"
    out = subprocess.run([sys.executable, "-m", "fatune.native"], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert "not used (FATUNE_NATIVE=0)" in out, out


def main():
    return script_tests.run(globals(), MISSING)


if __name__ == "__main__":
    sys.exit(main())
