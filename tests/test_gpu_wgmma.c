/* SPDX-License-Identifier: MIT */
/* The groundwork of a wgmma forward family (notes/wgmma-forward.md): the
 * shared-memory layout, the matrix descriptors and the fragment maps that
 * note derives from the PTX ISA, checked on the GPU before any kernel is
 * built on them. tests/data/wgmma_probe.cu runs
 *  - S = Q·Kᵀ with both operands K-major from 128-byte-swizzled slabs
 *    (m64n64k16, 8 k-steps across two slabs), and
 *  - O = P·V with P from registers and V N-major (m64n128k16, 4 k-steps),
 * on one warpgroup each, outputs poisoned first, against the host's
 * product of the same bf16 inputs in double. When the documented V
 * encoding fails, the swapped strides are tried and the result printed:
 * the note is then wrong and must be mended with the test.
 * Compiling the probe needs NVRTC only, so that part runs everywhere; the
 * rest exits 77 (skipped) without a GPU, or on a GPU other than sm_90. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "compile.h"
#include "cuda_api.h"
#include "gpu_run.h"
#include "gpu_test.h"

#define M 64       /* one warpgroup's rows */
#define D 128      /* Q and K columns (S's reduction), V and O columns */
#define N_S 64     /* keys: S's columns, P's columns, V's rows */
#define TOLERANCE 2e-3 /* max |error| over max |reference|; a wrong map gives O(1) */
#define ERRLEN 4096


/* bf16 bits of X (round to nearest even) and the value they hold. */
static uint16_t to_bf16(float x, float *held) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(held, &u, sizeof u);
  return (uint16_t)(u >> 16);
}

/* ROWS x COLS of uniform [-1, 1) values from the generator state. */
static void fill(uint16_t *bits, float *vals, int n, uint64_t *state) {
  for (int i = 0; i < n; i++) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    const float x = (float)((*state >> 40) & 0xffffff) / (float)(1 << 23) - 1.f;
    bits[i] = to_bf16(x, &vals[i]);
  }
}

/* Max |got - want| over max |want|; NaN (a poisoned element left) is +inf. */
static double rel_error(const float *got, const double *want, int n) {
  double err = 0, scale = 0;
  for (int i = 0; i < n; i++) {
    double e = fabs((double)got[i] - want[i]);
    if (isnan(e)) e = INFINITY;
    if (e > err) err = e;
    scale = fmax(scale, fabs(want[i]));
  }
  return scale > 0 ? err / scale : err;
}

typedef struct probe_run {
  const fat_cuda *cu;
  CUfunction fn;
  CUdeviceptr a, b, out, flag;
  size_t out_floats;
} probe_run;

/* Runs one probe with the descriptor strides LBO and SBO (bytes) into HOST;
 * returns the CUDA result; *misaligned is the tiles' base address mod 1024. */
static CUresult run_probe(const probe_run *r, uint32_t lbo, uint32_t sbo, float *host,
                          int *misaligned) {
  const fat_cuda *cu = r->cu;
  CUresult e = cu->cuMemsetD32(r->out, 0x7fc00000u, r->out_floats);  /* NaN: unwritten shows */
  void *args[] = {(void *)&r->a, (void *)&r->b, (void *)&r->out, &lbo, &sbo, (void *)&r->flag};
  if (e == CUDA_SUCCESS) e = cu->cuLaunchKernel(r->fn, 1, 1, 1, 128, 1, 1, 0, NULL, args, NULL);
  if (e == CUDA_SUCCESS) e = cu->cuCtxSynchronize();
  if (e == CUDA_SUCCESS) e = cu->cuMemcpyDtoH(host, r->out, r->out_floats * sizeof(float));
  if (e == CUDA_SUCCESS) e = cu->cuMemcpyDtoH(misaligned, r->flag, sizeof(int));
  return e;
}

int main(void) {
  char err[ERRLEN], path[4096];
  const char *dir = getenv("FATUNE_SOURCE_DIR");
  snprintf(path, sizeof path, "%s/tests/data/wgmma_probe.cu", dir ? dir : ".");
  char *source = check_read_file(path);
  REQUIRE_EXIT(source != NULL);

  /* Everywhere: the probe compiles for sm_90a, without spills. */
  fat_build b;
  REQUIRE_EXIT(fat_compile_one("wgmma_probe.cu", source, "sm_90a", &b, err, sizeof err) == 0);
  CHECK_WHY(b.ok, "NVRTC: %s", b.log ? b.log : "");
  REQUIRE_EXIT(b.ok);
  CHECK_INT(b.spill_stores, 0);
  free(source);

  fat_gpu *g = NULL;
  fat_gpu_info info;
  int opened = fat_gpu_open(0, &g, &info, err, sizeof err);
  if (opened != FAT_GPU_OPENED) {
    fat_build_free(&b);
    check_summary("test_gpu_wgmma");
    return check_failed ? 1 : gpu_open_failed(opened, err);
  }
  if (info.cc_major != 9) {
    printf("skipped: wgmma needs compute capability 9.x, %s is %d.%d\n", info.name, info.cc_major,
           info.cc_minor);
    fat_gpu_close(g);
    fat_build_free(&b);
    return check_failed ? 1 : SKIP;
  }
  const fat_cuda *cu = fat_gpu_driver(g);
  CUmodule mod = NULL;
  CUfunction ss = NULL, rs = NULL;
  REQUIRE_EXIT(cu->cuModuleLoadData(&mod, b.cubin) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu->cuModuleGetFunction(&ss, mod, "probe_ss") == CUDA_SUCCESS);
  REQUIRE_EXIT(cu->cuModuleGetFunction(&rs, mod, "probe_rs") == CUDA_SUCCESS);

  /* Inputs: Q[M][D], K[N_S][D], P[M][N_S], V[N_S][D], row-major bf16. */
  static uint16_t q_bits[M * D], k_bits[N_S * D], p_bits[M * N_S], v_bits[N_S * D];
  static float q[M * D], k[N_S * D], p[M * N_S], v[N_S * D], got[M * D];
  static double want[M * D];
  uint64_t state = 0x5eed5eedull;
  fill(q_bits, q, M * D, &state);
  fill(k_bits, k, N_S * D, &state);
  fill(p_bits, p, M * N_S, &state);
  fill(v_bits, v, N_S * D, &state);

  CUdeviceptr dq, dk, dp, dv, dout, dflag;
  REQUIRE_EXIT(cu->cuMemAlloc(&dq, sizeof q_bits) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu->cuMemAlloc(&dk, sizeof k_bits) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu->cuMemAlloc(&dp, sizeof p_bits) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu->cuMemAlloc(&dv, sizeof v_bits) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu->cuMemAlloc(&dout, sizeof got) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu->cuMemAlloc(&dflag, sizeof(int)) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu->cuMemcpyHtoD(dq, q_bits, sizeof q_bits) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu->cuMemcpyHtoD(dk, k_bits, sizeof k_bits) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu->cuMemcpyHtoD(dp, p_bits, sizeof p_bits) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu->cuMemcpyHtoD(dv, v_bits, sizeof v_bits) == CUDA_SUCCESS);

  /* S = Q·Kᵀ: K-major, LBO unused (16 bytes: the field's 1), SBO 1024. */
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N_S; j++) {
      double s = 0;
      for (int c = 0; c < D; c++) s += (double)q[i * D + c] * k[j * D + c];
      want[i * N_S + j] = s;
    }
  int misaligned = -1;
  probe_run r = {.cu = cu, .fn = ss, .a = dq, .b = dk, .out = dout, .flag = dflag,
                 .out_floats = M * N_S};
  CHECK_INT(run_probe(&r, 16, 1024, got, &misaligned), CUDA_SUCCESS);
  CHECK_INT(misaligned, 0);
  const double e_ss = rel_error(got, want, M * N_S);
  printf("probe_ss (Q·Kᵀ, K-major, SBO 1024): max error / max |S| = %.2e\n", e_ss);
  CHECK_WHY(e_ss <= TOLERANCE, "S[0][0..3] got %g %g %g %g, want %g %g %g %g", got[0], got[1],
            got[2], got[3], want[0], want[1], want[2], want[3]);

  /* O = P·V: V N-major, LBO = the slab stride (N_S rows of 128 bytes), SBO
   * = 1024 (8 keys); then the strides swapped, to say which the GPU reads. */
  for (int i = 0; i < M; i++)
    for (int c = 0; c < D; c++) {
      double o = 0;
      for (int j = 0; j < N_S; j++) o += (double)p[i * N_S + j] * v[j * D + c];
      want[i * D + c] = o;
    }
  r = (probe_run){.cu = cu, .fn = rs, .a = dp, .b = dv, .out = dout, .flag = dflag,
                  .out_floats = M * D};
  const uint32_t slab = N_S * 128;
  CHECK_INT(run_probe(&r, slab, 1024, got, &misaligned), CUDA_SUCCESS);
  CHECK_INT(misaligned, 0);
  const double e_rs = rel_error(got, want, M * D);
  printf("probe_rs (P·V, V N-major, LBO %u, SBO 1024): max error / max |O| = %.2e\n", slab, e_rs);
  CHECK_WHY(e_rs <= TOLERANCE, "O[0][0..3] got %g %g %g %g, want %g %g %g %g", got[0], got[1],
            got[2], got[3], want[0], want[1], want[2], want[3]);
  if (!(e_rs <= TOLERANCE) && run_probe(&r, 1024, slab, got, &misaligned) == CUDA_SUCCESS)
    printf("probe_rs with LBO and SBO swapped (LBO 1024, SBO %u): %.2e\n", slab,
           rel_error(got, want, M * D));

  CUdeviceptr all[] = {dq, dk, dp, dv, dout, dflag};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cu->cuMemFree(all[i]);
  cu->cuModuleUnload(mod);
  fat_gpu_close(g);
  fat_build_free(&b);
  return check_summary("test_gpu_wgmma");
}
