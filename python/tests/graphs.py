# SPDX-License-Identifier: MIT
"""CUDA-graph capture for the GPU tests (test_gpu_torch, test_gpu_native)."""
import torch


def capture(fn, warmups=3):
    """fn's work captured in a CUDA graph after warm-up calls on a side
    stream (a problem's first call opens the context, reads the databases
    and loads its module: none of it may be captured); returns (graph, what
    fn returned while captured)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out
