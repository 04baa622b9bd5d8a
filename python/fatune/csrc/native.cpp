// SPDX-License-Identifier: MIT
// The native host path of fatune.attention (python/fatune/native/ builds
// it with torch.utils.cpp_extension against the torch that runs it).
//
// The Python eager path (_ops.forward, _runtime.forward; _ops.forward_kvcache
// for attention_with_kvcache's 16-bit caches, the decoding step) spends its host
// time in Python: the memo's key, a ctypes struct, two ctypes calls, a
// torch.autograd.Function whose backward the autograd engine calls back into
// Python for. This file does the same for the common case in C++: the
// forward's args straight into fat_attn_args, the launch on torch's current
// stream, and the autograd node a torch::autograd::Function, whose backward
// runs without the interpreter.
//
// It never decides anything the Python path would decide differently. What
// it does not take at once -- any tensor the kernels cannot read as it lies,
// any status but FAT_OK from libfatune, a device whose context Python has
// not opened yet -- it declines: fwd returns an empty list and the caller
// runs the Python path, which opens the context, raises the error naming the
// value, or copies what needs copying. A backward it cannot launch goes to
// Python's _runtime.backward (bound by bind()). So every refusal and every
// result is the Python path's, and this file holds no error text of its own.
//
// libfatune is the one the binding loaded (ctypes): bind() takes its dlopen
// handle and looks the four calls up in it, so both paths share one library
// and its contexts.

#include <torch/extension.h>
#include <torch/csrc/Exceptions.h>
#include <c10/cuda/CUDAStream.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "fatune.h"

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Lib {
  decltype(&fat_attention_fwd_workspace) fwd_workspace = nullptr;
  decltype(&fat_attention_fwd) fwd = nullptr;
  decltype(&fat_attention_bwd_workspace) bwd_workspace = nullptr;
  decltype(&fat_attention_bwd) bwd = nullptr;
};

Lib lib;
// The Python path's backward (_runtime.backward), for what launch_bwd
// declines. Never freed: a py::object destroyed at exit, after the
// interpreter, would touch it without the GIL.
py::object *py_backward = nullptr;

constexpr int kMaxDevices = 64;
// Python's contexts, by device (set_context); never removed once set.
std::array<std::atomic<fat_context *>, kMaxDevices> contexts{};

constexpr uintptr_t kAlignBytes = 16;   // _runtime.ALIGN_BYTES
constexpr int64_t kStrideMultiple = 8;  // 16 bytes of a 16-bit type

// Thrown where the forward declines; never leaves this file.
struct Declined {};

// check_tensor's conditions for a 16-bit (batch, seqlen, heads, head_dim)
// CUDA tensor the kernels read where it lies.
bool readable(const at::Tensor &t) {
  if (!t.defined() || !t.is_cuda() || t.dim() != 4 || t.stride(3) != 1) return false;
  const auto st = t.scalar_type();
  if (st != at::kHalf && st != at::kBFloat16) return false;
  for (int i = 0; i < 4; ++i)
    if (t.size(i) == 0) return false;
  if (t.size(3) % kStrideMultiple) return false;
  for (int i = 0; i < 3; ++i)
    if (t.stride(i) % kStrideMultiple) return false;
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % kAlignBytes == 0;
}

// readable, and no element reachable by two indices (_runtime.kernel_layout).
bool readable_disjoint(const at::Tensor &t) {
  if (!readable(t)) return false;
  std::array<std::pair<int64_t, int64_t>, 4> dims;
  int n = 0;
  for (int i = 0; i < 4; ++i)
    if (t.size(i) > 1) dims[n++] = {t.stride(i), t.size(i)};
  std::sort(dims.begin(), dims.begin() + n);
  int64_t span = 1;
  for (int i = 0; i < n; ++i) {
    if (dims[i].first < span) return false;
    span = dims[i].first * dims[i].second;
  }
  return true;
}

struct Options {
  int64_t mask, window_left, window_right;
  double softmax_scale, softcap;
  bool deterministic;
};

void set_strides(long long *batch, long long *row, long long *head, const at::Tensor &t) {
  *batch = t.stride(0);
  *row = t.stride(1);
  *head = t.stride(2);
}

// fwd_args of _runtime: fat_attn_args of a dense call.
fat_attn_args fwd_args(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &o,
                       const at::Tensor &lse, const Options &op) {
  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  a.o = o.data_ptr();
  a.lse = lse.data_ptr<float>();
  set_strides(&a.q_batch_stride, &a.q_row_stride, &a.q_head_stride, q);
  set_strides(&a.k_batch_stride, &a.k_row_stride, &a.k_head_stride, k);
  set_strides(&a.v_batch_stride, &a.v_row_stride, &a.v_head_stride, v);
  set_strides(&a.o_batch_stride, &a.o_row_stride, &a.o_head_stride, o);
  a.batch = static_cast<int>(q.size(0));
  a.seqlen_q = static_cast<int>(q.size(1));
  a.heads = static_cast<int>(q.size(2));
  a.head_dim = static_cast<int>(q.size(3));
  a.seqlen_k = static_cast<int>(k.size(1));
  a.heads_k = static_cast<int>(k.size(2));
  a.dtype = q.scalar_type() == at::kBFloat16 ? FAT_ATTN_BF16 : FAT_ATTN_FP16;
  a.mask = static_cast<fat_attn_mask>(op.mask);
  a.window_left = static_cast<int>(op.window_left);
  a.window_right = static_cast<int>(op.window_right);
  a.softmax_scale = static_cast<float>(op.softmax_scale);
  a.softcap = static_cast<float>(op.softcap);
  return a;
}

// The context of Q's device, or nullptr where Python has not opened one.
fat_context *context_of(const at::Tensor &q) {
  const int device = q.get_device();
  return device >= 0 && device < kMaxDevices ? contexts[device].load(std::memory_order_acquire) : nullptr;
}

// 16-bit q, k, v the kernels read where they lie, of one dtype on one
// device, k and v alike, q's head dim, heads_k dividing heads, sizes within
// int (libfatune's fields): what the dense call and the KV-cache call share.
bool one_kind(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v) {
  if (!readable(q) || !readable(k) || !readable(v)) return false;
  if (k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type()) return false;
  if (k.device() != q.device() || v.device() != q.device()) return false;
  if (k.sizes() != v.sizes() || k.size(3) != q.size(3) || q.size(2) % k.size(2)) return false;
  for (const auto *t : {&q, &k})
    for (int i = 0; i < 4; ++i)
      if (t->size(i) > INT32_MAX) return false;
  return true;
}

// What the Python path (_runtime.check_qkv, then libfatune) would take
// without a copy: one_kind, k of q's batch.
bool takes(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v) {
  return one_kind(q, k, v) && k.size(0) == q.size(0);
}

// fwd_outputs' out and lse of Q: out contiguous in q's shape and type, lse
// (batch, heads, seqlen_q) fp32.
std::pair<at::Tensor, at::Tensor> outputs_of(const at::Tensor &q) {
  return {at::empty_like(q, at::MemoryFormat::Contiguous),
          at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat))};
}

// fat_attention_fwd of A (Q's call, its out and lse set) with the workspace
// it asks for, on torch's current stream; false on any status but FAT_OK
// (nothing launched then is the forward's own contract: libfatune checks
// before it launches).
bool launch(fat_context *ctx, fat_attn_args &a, const at::Tensor &q) {
  size_t need = 0;
  if (lib.fwd_workspace(ctx, &a, &need) != FAT_OK) return false;
  at::Tensor workspace;
  if (need) {
    // From the caching allocator on the current stream, which the launch
    // uses: freed on return, reused only by work queued after this one.
    workspace = at::empty({static_cast<int64_t>(need)}, q.options().dtype(at::kByte));
    a.workspace = workspace.data_ptr();
    a.workspace_bytes = need;
  }
  const auto stream = c10::cuda::getCurrentCUDAStream(q.get_device()).stream();
  return lib.fwd(ctx, &a, stream, nullptr) == FAT_OK;
}

// fat_attention_fwd of checked inputs into fresh out and lse; throws
// Declined where it declines.
std::pair<at::Tensor, at::Tensor> launch_fwd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                             const Options &op) {
  fat_context *ctx = context_of(q);
  if (!ctx) throw Declined{};
  auto [o, lse] = outputs_of(q);
  fat_attn_args a = fwd_args(q, k, v, o, lse, op);
  if (!launch(ctx, a, q)) throw Declined{};
  return {o, lse};
}

// The Python path's backward, for what launch_bwd declines; its exceptions
// (a ValueError naming the value) reach the caller as they are.
std::vector<at::Tensor> python_backward(const at::Tensor &dout, const at::Tensor &dlse,
                                        const std::vector<at::Tensor> &saved, const Options &op) {
  py::gil_scoped_acquire gil;
  try {
    py::object given = dlse.defined() ? py::cast(dlse) : py::none();
    py::tuple r = (*py_backward)(dout, saved[0], saved[1], saved[2], saved[3], saved[4], op.mask, op.window_left,
                                 op.window_right, op.softmax_scale, op.softcap, op.deterministic,
                                 py::arg("dlse") = given);
    return {r[0].cast<at::Tensor>(), r[1].cast<at::Tensor>(), r[2].cast<at::Tensor>()};
  } catch (py::error_already_set &e) {
    // As torch's own Python functions raise through the autograd engine:
    // the error kept in a python_error (persist, under the GIL: this
    // thread's Python state may not outlive the GIL's release), so the
    // caller of backward() gets the ValueError itself.
    e.restore();
    python_error err;
    err.persist();
    throw err;
  }
}

// fat_attention_bwd for DOUT and DLSE (undefined: none) of the forward
// whose q, k, v, out, lse are SAVED.
std::vector<at::Tensor> launch_bwd(at::Tensor dout, at::Tensor dlse, const std::vector<at::Tensor> &saved,
                                   const Options &op) {
  const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3], &lse = saved[4];
  fat_context *ctx = context_of(q);
  if (!ctx) return python_backward(dout, dlse, saved, op);
  if (!readable_disjoint(dout)) {
    if (dout.sizes() != q.sizes() || dout.scalar_type() != q.scalar_type() || dout.device() != q.device())
      return python_backward(dout, dlse, saved, op);
    dout = dout.clone(at::MemoryFormat::Contiguous);
  }
  if (dlse.defined()) {  // lse's layout (_runtime.check_dlse, dlse_layout)
    if (dlse.sizes() != lse.sizes() || dlse.scalar_type() != at::kFloat || dlse.device() != lse.device())
      return python_backward(dout, dlse, saved, op);
    dlse = dlse.contiguous();
  }
  at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
  fat_attn_bwd_args a = FAT_ATTN_BWD_ARGS_INIT;
  a.fwd = fwd_args(q, k, v, o, lse, op);
  a.dout = dout.data_ptr();
  a.dq = dq.data_ptr();
  a.dk = dk.data_ptr();
  a.dv = dv.data_ptr();
  set_strides(&a.do_batch_stride, &a.do_row_stride, &a.do_head_stride, dout);
  set_strides(&a.dq_batch_stride, &a.dq_row_stride, &a.dq_head_stride, dq);
  set_strides(&a.dk_batch_stride, &a.dk_row_stride, &a.dk_head_stride, dk);
  set_strides(&a.dv_batch_stride, &a.dv_row_stride, &a.dv_head_stride, dv);
  a.deterministic = op.deterministic ? 1 : 0;
  a.dlse = dlse.defined() ? dlse.data_ptr<float>() : nullptr;
  size_t need = 0;
  if (lib.bwd_workspace(ctx, &a, &need) != FAT_OK) return python_backward(dout, dlse, saved, op);
  at::Tensor workspace = at::empty({static_cast<int64_t>(std::max<size_t>(need, 1))}, q.options().dtype(at::kByte));
  a.workspace = workspace.data_ptr();
  a.workspace_bytes = need;
  const auto stream = c10::cuda::getCurrentCUDAStream(q.get_device()).stream();
  if (lib.bwd(ctx, &a, stream, nullptr) != FAT_OK) return python_backward(dout, dlse, saved, op);
  return {dq, dk, dv};
}

// _ops._Fwd in C++: the forward with its autograd formula.
struct Attention : public torch::autograd::Function<Attention> {
  static variable_list forward(AutogradContext *ctx, const at::Tensor &q, const at::Tensor &k,
                               const at::Tensor &v, int64_t mask, int64_t window_left, int64_t window_right,
                               double softmax_scale, double softcap, bool deterministic) {
    const Options op{mask, window_left, window_right, softmax_scale, softcap, deterministic};
    auto [o, lse] = launch_fwd(q, k, v, op);
    ctx->save_for_backward({q, k, v, o, lse});
    ctx->saved_data["mask"] = mask;
    ctx->saved_data["window_left"] = window_left;
    ctx->saved_data["window_right"] = window_right;
    ctx->saved_data["softmax_scale"] = softmax_scale;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["deterministic"] = deterministic;
    // An output the loss does not read reaches backward undefined, not as
    // zeros made for it (_ops._grads_as_given): lse in nearly every call.
    ctx->set_materialize_grads(false);
    return {o, lse};
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    variable_list none(9);
    at::Tensor dout = grads[0], dlse = grads[1];
    if (!dout.defined() && !dlse.defined()) return none;
    const auto &d = ctx->saved_data;
    const Options op{d.at("mask").toInt(), d.at("window_left").toInt(), d.at("window_right").toInt(),
                     d.at("softmax_scale").toDouble(), d.at("softcap").toDouble(), d.at("deterministic").toBool()};
    const auto saved = ctx->get_saved_variables();
    if (!dout.defined()) dout = at::zeros_like(saved[3]);  // lse alone reached the loss (_ops._dout_of)
    auto g = launch_bwd(dout, dlse, saved, op);
    none[0] = g[0];
    none[1] = g[1];
    none[2] = g[2];
    return none;
  }
};

// fatune.attention's forward (_ops.forward after its eager() test): [out,
// lse], with the autograd node where grad mode is on and q, k or v needs
// grad; [] where declined (run the Python path).
std::vector<at::Tensor> fwd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, int64_t mask,
                            int64_t window_left, int64_t window_right, double softmax_scale, double softcap,
                            bool deterministic) {
  if (!lib.fwd || !takes(q, k, v)) return {};
  try {
    if (at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad()))
      return Attention::apply(q, k, v, mask, window_left, window_right, softmax_scale, softcap, deterministic);
    const Options op{mask, window_left, window_right, softmax_scale, softcap, deterministic};
    auto [o, lse] = launch_fwd(q, k, v, op);
    return {o, lse};
  } catch (const Declined &) {
    return {};
  }
}

// check_offsets' conditions: a contiguous int32 (ENTRIES,) on Q's device.
bool offsets_of(const at::Tensor &t, int64_t entries, const at::Tensor &q) {
  return t.is_cuda() && t.scalar_type() == at::kInt && t.dim() == 1 && t.stride(0) == 1 && t.numel() == entries &&
         t.device() == q.device();
}

// What the Python path's check_kvcache takes of a 16-bit cache: one_kind
// (k_cache and v_cache a contiguous cache of q's batch, or with BLOCK_TABLE
// a pool of pages), the block table (batch, max_blocks) int32 with its last
// dimension contiguous, CACHE_SEQLENS (batch,) int32; the keys (the cache's,
// or the table's reach) within int. Returns them, or 0 where it declines.
int64_t kvcache_keys(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                     const c10::optional<at::Tensor> &cache_seqlens, const c10::optional<at::Tensor> &block_table) {
  if (!one_kind(q, k, v)) return 0;
  const int64_t batch = q.size(0);
  int64_t keys = k.size(1);
  if (block_table.has_value()) {
    const at::Tensor &bt = *block_table;
    if (!bt.is_cuda() || bt.scalar_type() != at::kInt || bt.dim() != 2 || bt.device() != q.device() ||
        bt.size(0) != batch || bt.stride(1) != 1 || bt.stride(0) > INT32_MAX)
      return 0;
    keys = bt.size(1) * k.size(1);
  } else if (k.size(0) != batch) {
    return 0;
  }
  if (cache_seqlens.has_value() && !offsets_of(*cache_seqlens, batch, q)) return 0;
  return keys >= 1 && keys <= INT32_MAX ? keys : 0;
}

// fatune.attention_with_kvcache's 16-bit call (_ops.forward_kvcache where no
// input needs a gradient): [out, lse], or [] where declined (run the Python
// path), as fwd.
std::vector<at::Tensor> fwd_kvcache(const at::Tensor &q, const at::Tensor &k_cache, const at::Tensor &v_cache,
                                    const c10::optional<at::Tensor> &cache_seqlens,
                                    const c10::optional<at::Tensor> &block_table, int64_t mask, int64_t window_left,
                                    int64_t window_right, double softmax_scale, double softcap) {
  if (!lib.fwd) return {};
  if (at::GradMode::is_enabled() && (q.requires_grad() || k_cache.requires_grad() || v_cache.requires_grad()))
    return {};
  const int64_t keys = kvcache_keys(q, k_cache, v_cache, cache_seqlens, block_table);
  if (!keys) return {};
  fat_context *ctx = context_of(q);
  if (!ctx) return {};
  auto [o, lse] = outputs_of(q);
  const Options op{mask, window_left, window_right, softmax_scale, softcap, false};
  fat_attn_args a = fwd_args(q, k_cache, v_cache, o, lse, op);
  a.seqused_k = cache_seqlens.has_value() ? cache_seqlens->data_ptr<int>() : nullptr;
  if (block_table.has_value()) {  // _runtime.kvcache_args
    a.seqlen_k = static_cast<int>(keys);
    a.block_table = block_table->data_ptr<int>();
    a.block_table_stride = static_cast<int>(block_table->stride(0));
    a.page_size = static_cast<int>(k_cache.size(1));
    a.num_pages = static_cast<int>(k_cache.size(0));
  }
  if (!launch(ctx, a, q)) return {};
  return {o, lse};
}

template <typename F>
void look_up(F *f, void *handle, const char *name) {
  void *p = dlsym(handle, name);
  TORCH_CHECK(p, "fatune native path: libfatune has no ", name);
  *f = reinterpret_cast<F>(p);
}

// HANDLE: the dlopen handle of the libfatune the binding loaded (ctypes'
// CDLL._handle); BACKWARD: _runtime.backward.
void bind(uintptr_t handle, py::object backward) {
  void *h = reinterpret_cast<void *>(handle);
  Lib l;
  look_up(&l.fwd_workspace, h, "fat_attention_fwd_workspace");
  look_up(&l.fwd, h, "fat_attention_fwd");
  look_up(&l.bwd_workspace, h, "fat_attention_bwd_workspace");
  look_up(&l.bwd, h, "fat_attention_bwd");
  py_backward = new py::object(std::move(backward));
  lib = l;
}

void set_context(int64_t device, uintptr_t ctx) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "fatune native path: device ", device, " is not 0 .. ",
              kMaxDevices - 1);
  contexts[device].store(reinterpret_cast<fat_context *>(ctx), std::memory_order_release);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "fatune.attention's host path in C++ (python -m fatune.native)";
  m.def("bind", &bind, "bind(libfatune_handle, python_backward)");
  m.def("set_context", &set_context, "set_context(device, fat_context pointer)");
  // Without the GIL, as ctypes calls libfatune: a first call of a problem
  // may load a module, and other Python threads run meanwhile.
  m.def("fwd", &fwd, py::call_guard<py::gil_scoped_release>(),
        "fwd(q, k, v, mask, window_left, window_right, softmax_scale, softcap, deterministic) -> [out, lse] "
        "or [] where declined");
  m.def("fwd_kvcache", &fwd_kvcache, py::call_guard<py::gil_scoped_release>(),
        "fwd_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, mask, window_left, window_right, "
        "softmax_scale, softcap) -> [out, lse] or [] where declined");
}
