# SPDX-License-Identifier: MIT
"""fatune's Python API in FlashAttention's names, on the CPU: a positional
port of flash_attn_func or flash_attn_varlen_func fails with TypeError (their
fourth and eighth arguments are dropout_p, which must not land on another
option); what FlashAttention takes and fatune has not (dropout_p other than 0,
alibi_slopes, return_attn_probs) is refused with a ValueError naming the
value; softmax_scale and its SDPA name scale are one argument. Every option
is checked before the tensors, so the refusals need neither a GPU nor
libfatune; the tensors here are CPU ones, and a call that passes its option
checks is refused for them ("q is on cpu"), which shows the options passed.
Needs PyTorch: skipped (exit 77 as a script) without.

    python3 -m pytest python/tests/test_api.py
    python3 python/tests/test_api.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import script_tests  # noqa: E402
try:
    import torch
except ImportError:
    torch = None
try:
    import pytest
except ImportError:
    pytest = None
import fatune  # noqa: E402

if pytest is not None:
    pytestmark = pytest.mark.skipif(torch is None, reason="no PyTorch")

ON_CPU = "q is on cpu; fatune.attention needs CUDA tensors"
ON_CPU_VARLEN = "q is on cpu; fatune.attention_varlen needs CUDA tensors"


def raised(fn):
    """(type, message) of what FN raised, or (None, None)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 -- the test compares the type itself
        return type(e), str(e)
    return None, None


def dense():
    return torch.zeros(1, 8, 2, 64, dtype=torch.float16)


def packed():
    q = torch.zeros(8, 2, 64, dtype=torch.float16)
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    return q, cu


def test_positional_ports_fail():
    """flash_attn_func(q, k, v, 0.1) and flash_attn_varlen_func(q, k, v, cu_q,
    cu_k, max_q, max_k, 0.1) pass dropout_p by position: a TypeError here."""
    q = dense()
    assert raised(lambda: fatune.attention(q, q, q, 0.1)) == (
        TypeError, "attention() takes 3 positional arguments but 4 were given")
    assert raised(lambda: fatune.attention(q, q, q, True)) == (
        TypeError, "attention() takes 3 positional arguments but 4 were given")
    p, cu = packed()
    assert raised(lambda: fatune.attention_varlen(p, p, p, cu, cu, 5, 5, 0.1)) == (
        TypeError, "attention_varlen() takes 7 positional arguments but 8 were given")
    assert raised(lambda: fatune.attention_with_lse(q, q, q, True))[0] is TypeError
    assert raised(lambda: fatune.attention_varlen_with_lse(p, p, p, cu, cu, 5, 5, 0.1))[0] is TypeError
    assert raised(lambda: fatune.attention_bwd(q, q, q, q, q, q, True)) == (
        TypeError, "attention_bwd() takes 6 positional arguments but 7 were given")
    assert raised(lambda: fatune.select(q, q, q, True)) == (
        TypeError, "select() takes 3 positional arguments but 4 were given")
    assert raised(lambda: fatune.select_bwd(q, q, q, True)) == (
        TypeError, "select_bwd() takes 3 positional arguments but 4 were given")


def test_flash_attention_names_accepted():
    """FlashAttention's keywords with their own values pass the option checks
    (the CPU tensors are what is refused)."""
    q = dense()
    for kw in (dict(softmax_scale=0.125), dict(scale=0.125), dict(window_size=(16, 0)), dict(softcap=30.0),
               dict(deterministic=True), dict(return_softmax_lse=True), dict(dropout_p=0.0), dict(dropout_p=0),
               dict(alibi_slopes=None), dict(return_attn_probs=False), dict(causal=True)):
        assert raised(lambda: fatune.attention(q, q, q, **kw)) == (ValueError, ON_CPU), kw
    p, cu = packed()
    for kw in (dict(softmax_scale=0.125), dict(seqused_k=cu[1:]), dict(deterministic=True),
               dict(return_softmax_lse=True), dict(dropout_p=0.0), dict(window_size=(4, 0), causal=True)):
        assert raised(lambda: fatune.attention_varlen(p, p, p, cu, cu, 5, 5, **kw)) == (ValueError,
                                                                                       ON_CPU_VARLEN), kw


def test_refusals_name_the_value():
    """What fatune has not, refused by name and value; a value of the wrong
    kind is a TypeError."""
    q = dense()
    p, cu = packed()
    cases = [
        (dict(dropout_p=0.1), ValueError,
         "fatune.attention: dropout_p 0.1: fatune has no attention dropout; dropout_p must be 0.0"),
        (dict(dropout_p="0"), TypeError, "dropout_p must be a float, got str"),
        (dict(dropout_p=False), TypeError, "dropout_p must be a float, got bool"),
        (dict(alibi_slopes=torch.zeros(2)), ValueError,
         "fatune.attention: alibi_slopes Tensor: fatune has no ALiBi; alibi_slopes must be None"),
        (dict(return_attn_probs=True), ValueError,
         "fatune.attention: return_attn_probs True: fatune never forms the attention probabilities; "
         "return_softmax_lse=True returns the log-sum-exp"),
        (dict(return_softmax_lse=1), TypeError, "return_softmax_lse must be a bool, got 1"),
        (dict(deterministic="yes"), TypeError, "deterministic must be a bool, got 'yes'"),
        (dict(softmax_scale=0.1, scale=0.2), TypeError,
         "fatune.attention: softmax_scale=0.1 and scale=0.2 both given; they are one argument "
         "(softmax_scale, FlashAttention's name; scale, SDPA's)"),
        (dict(softmax_scale=-1.0), ValueError, "softmax_scale -1.0 must be positive and finite"),
        (dict(softmax_scale=float("nan")), ValueError, "softmax_scale nan must be positive and finite"),
        (dict(softmax_scale="1"), TypeError, "softmax_scale must be a float or None, got str"),
        (dict(scale="1"), TypeError, "scale must be a float or None, got str"),
        (dict(scale=0.0), ValueError, "scale 0.0 must be positive and finite"),
        (dict(causal=1), TypeError, "causal must be a bool, got 1"),
        (dict(window_size=5), TypeError, "window_size must be a pair of ints (left, right), got 5"),
        (dict(window_size=(-2, 0)), ValueError,
         "window_size (-2, 0): left bound -2 must be -1 (unbounded) or 0 .. 2147483647"),
        (dict(softcap=-1.0), ValueError, "softcap -1.0 must be 0 (no cap) or positive and finite"),
        (dict(softcap="50"), TypeError, "softcap must be a float, got str"),
    ]
    for kw, kind, message in cases:
        assert raised(lambda: fatune.attention(q, q, q, **kw)) == (kind, message), kw
        varlen = message.replace("fatune.attention:", "fatune.attention_varlen:")
        assert raised(lambda: fatune.attention_varlen(p, p, p, cu, cu, 5, 5, **kw)) == (kind, varlen), kw
    assert raised(lambda: fatune.attention(q, q, q, softmax_scale_typo=1.0))[0] is TypeError
    assert raised(lambda: fatune.attention_bwd(q, q, q, q, q, q, softmax_scale=0.1, scale=0.2)) == (
        TypeError, "fatune.attention_bwd: softmax_scale=0.1 and scale=0.2 both given; they are one argument "
        "(softmax_scale, FlashAttention's name; scale, SDPA's)")
    assert raised(lambda: fatune.attention_bwd(q, q, q, q, q, q, deterministic=1)) == (
        TypeError, "deterministic must be a bool, got 1")
    assert raised(lambda: fatune.select_bwd(q, q, q, deterministic=1)) == (
        TypeError, "deterministic must be a bool, got 1")


def test_descales_need_fp8():
    """q_descale, k_descale, v_descale (FlashAttention-3's fp8 arguments) with
    16-bit q, k, v: a ValueError naming the ones given, before the tensors'
    own checks."""
    q = dense()
    d = torch.ones(())
    assert raised(lambda: fatune.attention(q, q, q, k_descale=d)) == (
        ValueError, "fatune.attention: k_descale given with torch.float16 q, k and v: descale factors are "
        "for torch.float8_e4m3fn inputs; pass None")
    assert raised(lambda: fatune.attention(q, q, q, q_descale=None, k_descale=None, v_descale=None)) == (
        ValueError, ON_CPU)
    q8 = q.to(torch.float8_e4m3fn)
    assert raised(lambda: fatune.attention(q8, q8, q8, q_descale=d)) == (ValueError, ON_CPU)


def test_fp8_kv_cache_descales():
    """An fp8 K/V cache (fp16 q, e4m3 k and v): q_descale refused by name
    before the tensors' own checks (q is not fp8), k_descale and v_descale
    taken (the CPU tensors are refused only after); descale factors with a
    16-bit cache refused by name."""
    q = dense()
    d = torch.ones(())
    k8 = q.to(torch.float8_e4m3fn)
    assert raised(lambda: fatune.attention(q, k8, k8, q_descale=d)) == (
        ValueError, "fatune.attention: q_descale given with torch.float16 q: q takes no descale factor (only "
        "an fp8 q does; an fp8 K/V cache's factors are k_descale and v_descale); pass None")
    assert raised(lambda: fatune.attention(q, k8, k8, k_descale=d, v_descale=d)) == (ValueError, ON_CPU)
    kvcache = "fatune.attention_with_kvcache"
    assert raised(lambda: fatune.attention_with_kvcache(q, k8, k8, q_descale=d)) == (
        ValueError, f"{kvcache}: q_descale given with torch.float16 q: q takes no descale factor (only an fp8 "
        "q does; an fp8 K/V cache's factors are k_descale and v_descale); pass None")
    assert raised(lambda: fatune.attention_with_kvcache(q, k8, k8, k_descale=d)) == (
        ValueError, f"q is on cpu; {kvcache} needs CUDA tensors")
    assert raised(lambda: fatune.attention_with_kvcache(q, q, q, v_descale=d)) == (
        ValueError, f"{kvcache}: v_descale given with a torch.float16 cache: descale factors are for a "
        "torch.float8_e4m3fn cache; pass None")


def main():
    return script_tests.run(globals(), "no PyTorch" if torch is None else None)


if __name__ == "__main__":
    sys.exit(main())
