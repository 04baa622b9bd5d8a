#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The fp8 (e4m3) forward (issue 26): fatune.attention on torch.float8_e4m3fn
q, k and v against cuDNN's fp8 SDPA graph (the cudnn frontend's
graph.sdpa_fp8) on the same inputs, and fatune's bf16 forward on the
dequantised inputs, with the error of each against a float64 reference.

Shapes are FlashAttention's benchmark shapes: batch x seqlen = 16384 tokens,
heads x head_dim = 2048, for head dims 64, 128 and 256, no mask and causal,
seqlen 1024, 4096 and 16384. Each shape's q, k and v are drawn in fp32
(standard normal), quantised to e4m3 with one descale factor per tensor
(amax / 448), and the dequantised values (e4m3 x descale) are what every
path computes on: fatune's e4m3 forward and cuDNN's from the e4m3 bytes and
the factors, fatune's bf16 forward from their bf16 rounding, the reference
from them in float64 (on the GPU, in chunks of rows). cuDNN's output is
bf16 where its engine allows it, else e4m3 with an output scale (cuDNN on
Hopper writes e4m3 O), dequantised for the error table; the table says
which.

Timing as bench_paged.py's: each cell the median device time of --reps
calls after --warmup, CUDA events around each, L2 flushed before each and
the call queued behind a sleep kernel so that the events hold the GPU's
time, not the host's. TFLOP/s = 4·B·H·S·S·D / time, halved for causal.
Prints markdown tables (TFLOP/s, fatune ÷ cuDNN, fp8 ÷ bf16; rel_l2 and max
abs error); --out DIR writes bench_fp8.md and bench_fp8.json there.

Without the cudnn frontend (`import cudnn`: the nvidia-cudnn-frontend
wheel) the cuDNN columns say they were not run, and why; without a CUDA
device the script exits 77 (skipped). --dry-run prints the plan (shapes,
FLOPs) and what imports, and needs no GPU.

    FATUNE_LIB=build/runtime/libfatune.so python3 bench/bench_fp8.py --out results/
    python3 bench/bench_fp8.py --dry-run
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

SKIP = 77
TOKENS, HIDDEN = 16384, 2048   # FlashAttention's benchmark shapes: batch x seqlen, heads x head_dim
HEAD_DIMS = (64, 128, 256)
SEQLENS = (1024, 4096, 16384)
E4M3_MAX = 448.0               # the largest finite FP8 E4M3FN value
P_SCALE = 256.0                # cuDNN's scale_s: softmax probabilities (<= 1) into e4m3's range
FLUSH_BYTES = 256 << 20        # more than the H100's and H200's L2
REF_CHUNK = 1 << 26            # float64 scores a reference step holds (512 MiB)


def flops(b, h, s, d, causal):
    f = 4.0 * b * h * s * s * d
    return f / 2 if causal else f


def shapes(head_dims, seqlens):
    """(head_dim, causal, batch, heads, seqlen) of the run, in table order."""
    for d in head_dims:
        for causal in (False, True):
            for s in seqlens:
                yield d, causal, TOKENS // s, HIDDEN // d, s


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="", help="folder for bench_fp8.md and bench_fp8.json")
    ap.add_argument("--reps", type=int, default=30, help="timed calls per cell (default 30)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls before them (default 5)")
    ap.add_argument("--head-dims", default=",".join(map(str, HEAD_DIMS)),
                    help="comma-separated, of 64, 128, 256 (default all)")
    ap.add_argument("--seqlens", default=",".join(map(str, SEQLENS)),
                    help="comma-separated, each dividing 16384 (default 1024,4096,16384)")
    ap.add_argument("--no-cudnn", action="store_true", help="skip cuDNN's fp8 graph")
    ap.add_argument("--no-check", action="store_true", help="skip the float64 reference (timings only)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and what imports; no GPU")
    o = ap.parse_args(argv)
    if o.reps < 1 or o.warmup < 0:
        ap.error(f"--reps {o.reps}, --warmup {o.warmup}: reps >= 1, warmup >= 0")
    try:
        o.head_dims = tuple(int(x) for x in o.head_dims.split(","))
        o.seqlens = tuple(int(x) for x in o.seqlens.split(","))
    except ValueError:
        ap.error(f"--head-dims {o.head_dims!r}, --seqlens {o.seqlens!r}: comma-separated integers")
    for d in o.head_dims:
        if d not in HEAD_DIMS:
            ap.error(f"--head-dims: {d} is not one of {', '.join(map(str, HEAD_DIMS))}")
    for s in o.seqlens:
        if s < 1 or TOKENS % s:
            ap.error(f"--seqlens: {s} does not divide {TOKENS} (batch x seqlen = {TOKENS} tokens)")
    return o


def import_cudnn():
    """(the cudnn frontend module, None) or (None, why it is not there)."""
    try:
        import cudnn
    except Exception as e:  # noqa: BLE001 -- ImportError, or its library failing to load
        return None, f"import cudnn failed ({type(e).__name__}: {str(e).splitlines()[0][:160]})"
    if not hasattr(cudnn, "pygraph"):
        return None, f"this cudnn module ({getattr(cudnn, '__file__', '?')}) has no pygraph"
    return cudnn, None


def dry_run(o):
    print(f"plan: {len(list(shapes(o.head_dims, o.seqlens)))} shapes, {o.reps} timed calls each after "
          f"{o.warmup}")
    for d, causal, b, h, s in shapes(o.head_dims, o.seqlens):
        print(f"  d{d} {'causal' if causal else 'none':6s} batch {b:2d} heads {h:2d} seqlen {s:5d}: "
              f"{flops(b, h, s, d, causal) / 1e12:.3f} TFLOP a forward")
    try:
        import torch
        print(f"torch {torch.__version__}, CUDA {'available' if torch.cuda.is_available() else 'not available'}")
    except ImportError as e:
        print(f"torch: not importable ({e})")
    try:
        import fatune  # noqa: F401
        print("fatune: imports")
    except Exception as e:  # noqa: BLE001
        print(f"fatune: does not import ({e})")
    cudnn, why = import_cudnn()
    print(f"cudnn frontend: {'version ' + str(cudnn.backend_version()) if cudnn else why}")
    return 0


class Bench:
    """The GPU side: inputs, reference, the three forwards, timing."""

    def __init__(self, torch, o):
        import cuda_timing
        self.torch, self.o = torch, o
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        self.sleep = cuda_timing.sleep_cycles(torch)
        self.e4m3 = torch.float8_e4m3fn

    def timed(self, fn):
        """Median ms of FN: events around each call, L2 flushed, queued behind a sleep."""
        torch = self.torch
        for _ in range(self.o.warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.o.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.o.reps)]
        for i in range(self.o.reps):
            self.flush.zero_()
            torch.cuda._sleep(self.sleep)
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        ms = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
        return ms[len(ms) // 2]

    def quantise(self, x):
        """(x in e4m3, its descale factor: an fp32 () tensor) with amax
        mapped to e4m3's largest value."""
        amax = x.abs().amax().clamp(min=1e-12)
        descale = (amax / E4M3_MAX).float()
        return (x / descale).to(self.e4m3), descale.reshape(())

    def reference(self, q, k, v, causal):
        """float64 attention of (b, s, h, d) Q, K, V (the dequantised
        values), chunked so that a step holds at most REF_CHUNK scores."""
        torch = self.torch
        b, s, h, d = q.shape
        out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
        rows = max(1, min(s, REF_CHUNK // s))
        scale = 1.0 / math.sqrt(d)
        for bi in range(b):
            for hi in range(h):
                kh = k[bi, :, hi].double()
                vh = v[bi, :, hi].double()
                for r0 in range(0, s, rows):
                    r1 = min(s, r0 + rows)
                    sc = (q[bi, r0:r1, hi].double() @ kh.T) * scale
                    if causal:  # seqlen_q = seqlen_k: bottom-right is top-left
                        keep = (torch.arange(r0, r1, device=q.device)[:, None]
                                >= torch.arange(s, device=q.device)[None, :])
                        sc = sc.masked_fill(~keep, float("-inf"))
                    out[bi, r0:r1, hi] = torch.softmax(sc, dim=-1) @ vh
        return out

    @staticmethod
    def errors(o, ref):
        diff = o.double() - ref
        return {"rel_l2": (diff.norm() / ref.norm()).item(), "max_abs": diff.abs().max().item()}


class CudnnFp8:
    """cuDNN's fp8 SDPA forward graph for one shape (the cudnn frontend's
    graph.sdpa_fp8), on (b, s, h, d) e4m3 tensors seen as (b, h, s, d):
    bf16 O where the engine takes it, else e4m3 O with an output scale."""

    def __init__(self, cudnn, torch, b, h, s, d, causal, v_amax):
        self.cudnn, self.torch = cudnn, torch
        self.handle = cudnn.create_handle()
        cudnn.set_stream(handle=self.handle, stream=torch.cuda.current_stream().cuda_stream)
        self.dims = [b, h, s, d]
        self.strides = [s * h * d, d, h * d, 1]  # (b, s, h, d) storage
        # O is a convex combination of v's rows: |O| <= amax(v).
        self.scale_o = torch.full((1, 1, 1, 1), E4M3_MAX / max(v_amax, 1e-12), device="cuda")
        errors = []
        for o_type in (cudnn.data_type.BFLOAT16, cudnn.data_type.FP8_E4M3):
            try:
                self._build(d, causal, o_type)
                self.o_dtype = "bf16" if o_type == cudnn.data_type.BFLOAT16 else "e4m3"
                return
            except Exception as e:  # noqa: BLE001 -- cudnnGraphNotSupportedError and kin
                errors.append(f"O {o_type}: {str(e).splitlines()[0][:160]}")
        raise RuntimeError("; ".join(errors))

    def _build(self, d, causal, o_type):
        cudnn, torch = self.cudnn, self.torch
        e4m3, fp32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=e4m3, intermediate_data_type=fp32, compute_data_type=fp32,
                          handle=self.handle)
        self.t = {n: g.tensor(name=n, dim=self.dims, stride=self.strides, data_type=e4m3) for n in "qkv"}
        one = dict(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=fp32)
        for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"):
            self.t[n] = g.tensor(name=n, **one)
        o, _, amax_s, amax_o = g.sdpa_fp8(
            q=self.t["q"], k=self.t["k"], v=self.t["v"], descale_q=self.t["descale_q"],
            descale_k=self.t["descale_k"], descale_v=self.t["descale_v"], descale_s=self.t["descale_s"],
            scale_s=self.t["scale_s"], scale_o=self.t["scale_o"], is_inference=True,
            attn_scale=1.0 / math.sqrt(d), use_causal_mask=causal, name="sdpa_fp8")
        o.set_output(True).set_dim(self.dims).set_stride(self.strides).set_data_type(o_type)
        for amax in (amax_s, amax_o):
            amax.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(fp32)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        self.graph, self.o_t, self.amax_t = g, o, (amax_s, amax_o)
        self.workspace = torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8, device="cuda")
        b, h, s, d = self.dims
        self.out = torch.empty((b, s, h, d), device="cuda",
                               dtype=torch.bfloat16 if o_type == cudnn.data_type.BFLOAT16 else torch.float8_e4m3fn)
        self.amax = [torch.empty((1, 1, 1, 1), device="cuda") for _ in range(2)]

    def bind(self, q8, k8, v8, dq, dk, dv):
        torch = self.torch
        as4 = lambda x: x.reshape(1, 1, 1, 1)  # noqa: E731
        self.pack = {self.t["q"]: q8, self.t["k"]: k8, self.t["v"]: v8, self.t["descale_q"]: as4(dq),
                     self.t["descale_k"]: as4(dk), self.t["descale_v"]: as4(dv),
                     self.t["descale_s"]: torch.full((1, 1, 1, 1), 1.0 / P_SCALE, device="cuda"),
                     self.t["scale_s"]: torch.full((1, 1, 1, 1), P_SCALE, device="cuda"),
                     self.t["scale_o"]: self.scale_o, self.o_t: self.out,
                     self.amax_t[0]: self.amax[0], self.amax_t[1]: self.amax[1]}

    def __call__(self):
        self.graph.execute(self.pack, self.workspace, handle=self.handle)
        return self.out

    def dequantised(self):
        """O in fp32: bf16 as it is, e4m3 divided by its output scale."""
        o = self.out.float()
        return o if self.o_dtype == "bf16" else o / self.scale_o.reshape(())


def fmt(x, spec=".0f"):
    return "-" if x is None else format(x, spec)


def tables(rows, gpu, cudnn_note):
    """The two markdown tables of ROWS."""
    lines = [f"fp8 (e4m3) forward on {gpu}: TFLOP/s (4·B·H·S·S·D / time, halved for causal), the median "
             "of the timed calls; batch x seqlen = 16384, heads x head_dim = 2048.", ""]
    if cudnn_note:
        lines += [f"cuDNN fp8 column not run: {cudnn_note}", ""]
    lines += ["| d | mask | seqlen | batch x heads | fatune fp8 | cuDNN fp8 | fatune ÷ cuDNN | fatune bf16 | "
              "fp8 ÷ bf16 | fatune fp8 variant |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = r["fatune_fp8_tflops"] / r["cudnn_fp8_tflops"] if r.get("fatune_fp8_tflops") and \
            r.get("cudnn_fp8_tflops") else None
        vs16 = r["fatune_fp8_tflops"] / r["fatune_bf16_tflops"] if r.get("fatune_fp8_tflops") and \
            r.get("fatune_bf16_tflops") else None
        lines.append(f"| {r['head_dim']} | {r['mask']} | {r['seqlen']} | {r['batch']} x {r['heads']} | "
                     f"{fmt(r.get('fatune_fp8_tflops'))} | {fmt(r.get('cudnn_fp8_tflops'))} | "
                     f"{fmt(ratio, '.2f')} | {fmt(r.get('fatune_bf16_tflops'))} | {fmt(vs16, '.2f')} | "
                     f"{r.get('fatune_fp8_variant') or r.get('fatune_fp8_error', '-')} |")
    lines += ["", "Error against the float64 reference of the dequantised inputs (rel_l2 = ‖o − ref‖ / ‖ref‖; "
              "max abs = max |o − ref|); cuDNN's O as it wrote it (O dtype), dequantised.", "",
              "| d | mask | seqlen | fatune fp8 rel_l2 | fatune fp8 max abs | cuDNN fp8 rel_l2 | "
              "cuDNN fp8 max abs | cuDNN O dtype | fatune bf16 rel_l2 | fatune bf16 max abs |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        e = lambda k: fmt(r.get(k), ".2e")  # noqa: E731
        lines.append(f"| {r['head_dim']} | {r['mask']} | {r['seqlen']} | {e('fatune_fp8_rel_l2')} | "
                     f"{e('fatune_fp8_max_abs')} | {e('cudnn_fp8_rel_l2')} | {e('cudnn_fp8_max_abs')} | "
                     f"{r.get('cudnn_o_dtype', '-')} | {e('fatune_bf16_rel_l2')} | {e('fatune_bf16_max_abs')} |")
    errs = [f"- d{r['head_dim']} {r['mask']} s{r['seqlen']}: {k}: {r[k]}" for r in rows for k in sorted(r)
            if k.endswith("_error")]
    if errs:
        lines += ["", "Not run:"] + errs
    return "\n".join(lines) + "\n"


def first_line(e):
    return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def main(argv=None):
    o = parse_args(argv)
    if o.dry_run:
        return dry_run(o)
    import cuda_timing
    torch = cuda_timing.cuda_torch()
    if torch is None:
        return SKIP
    if not hasattr(torch, "float8_e4m3fn"):
        print(f"skipped: torch {torch.__version__} has no float8_e4m3fn")
        return SKIP
    import fatune

    cudnn, cudnn_note = (None, "--no-cudnn") if o.no_cudnn else import_cudnn()
    if cudnn_note:
        print(f"cuDNN fp8: not run: {cudnn_note}")
    bench = Bench(torch, o)
    gpu = torch.cuda.get_device_name()
    rows = []
    for d, causal, b, h, s in shapes(o.head_dims, o.seqlens):
        mask = "causal" if causal else "none"
        row = {"head_dim": d, "mask": mask, "seqlen": s, "batch": b, "heads": h}
        f = flops(b, h, s, d, causal)
        g = torch.Generator(device="cuda").manual_seed(d * 100003 + s + causal)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", generator=g) for _ in range(3))
        (q8, dq), (k8, dk), (v8, dv) = (bench.quantise(x) for x in (q, k, v))
        del q, k, v
        qd, kd, vd = (x8.float() * dx for x8, dx in ((q8, dq), (k8, dk), (v8, dv)))
        ref = None if o.no_check else bench.reference(qd, kd, vd, causal)
        # fatune's e4m3 forward on the bytes and the factors.
        try:
            run = lambda: fatune.attention(q8, k8, v8, causal=causal, q_descale=dq, k_descale=dk,  # noqa: E731
                                           v_descale=dv)
            out = run()
            row["fatune_fp8_variant"] = fatune.last_choice().variant
            if ref is not None:
                row.update({f"fatune_fp8_{k}": x for k, x in bench.errors(out, ref).items()})
            row["fatune_fp8_tflops"] = f / (bench.timed(run) * 1e-3) / 1e12
        except Exception as e:  # noqa: BLE001 -- no e4m3 kernel, not Hopper: the row says so
            row["fatune_fp8_error"] = first_line(e)
        # fatune's bf16 forward on the dequantised values.
        qb, kb, vb = (x.bfloat16() for x in (qd, kd, vd))
        try:
            run = lambda: fatune.attention(qb, kb, vb, causal=causal)  # noqa: E731
            out = run()
            row["fatune_bf16_variant"] = fatune.last_choice().variant
            if ref is not None:
                row.update({f"fatune_bf16_{k}": x for k, x in bench.errors(out, ref).items()})
            row["fatune_bf16_tflops"] = f / (bench.timed(run) * 1e-3) / 1e12
        except Exception as e:  # noqa: BLE001
            row["fatune_bf16_error"] = first_line(e)
        del qb, kb, vb
        # cuDNN's fp8 graph on the same bytes and factors.
        if cudnn is not None:
            try:
                c = CudnnFp8(cudnn, torch, b, h, s, d, causal, vd.abs().max().item())
                c.bind(q8, k8, v8, dq, dk, dv)
                c()
                torch.cuda.synchronize()
                row["cudnn_o_dtype"] = c.o_dtype
                if ref is not None:
                    row.update({f"cudnn_fp8_{k}": x for k, x in bench.errors(c.dequantised(), ref).items()})
                row["cudnn_fp8_tflops"] = f / (bench.timed(c) * 1e-3) / 1e12
                del c
            except Exception as e:  # noqa: BLE001
                row["cudnn_fp8_error"] = first_line(e)
        del ref, qd, kd, vd
        torch.cuda.empty_cache()
        rows.append(row)
        print(f"d{d} {mask} s{s}: fatune fp8 {fmt(row.get('fatune_fp8_tflops'))} "
              f"(rel_l2 {fmt(row.get('fatune_fp8_rel_l2'), '.2e')}), cuDNN fp8 {fmt(row.get('cudnn_fp8_tflops'))} "
              f"(rel_l2 {fmt(row.get('cudnn_fp8_rel_l2'), '.2e')}), fatune bf16 "
              f"{fmt(row.get('fatune_bf16_tflops'))} TFLOP/s", flush=True)
    md = tables(rows, gpu, cudnn_note)
    print()
    print(md)
    if o.out:
        os.makedirs(o.out, exist_ok=True)
        with open(os.path.join(o.out, "bench_fp8.md"), "w") as fh:
            fh.write(md)
        with open(os.path.join(o.out, "bench_fp8.json"), "w") as fh:
            json.dump({"gpu": gpu, "cudnn": None if cudnn is None else str(cudnn.backend_version()),
                       "cudnn_note": cudnn_note, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
