// FlashAttention-2 style forward with mma.sync (sm_80 and newer).
//
// One thread block owns kBlockM query rows of one (batch, head). Its Q tile
// stays resident; K/V tiles of kBlockN keys stream through shared memory with
// cp.async, kStages deep. Each warp owns kWarpRows whole query rows, so the
// online softmax of a row never leaves its quad of threads:
//   S = Q·Kᵀ            (m16n8k16 MMAs, fp32 accumulators)
//   m_new = max(m, rowmax(S)),  alpha = exp2((m - m_new)·scale_log2)
//   P = exp2(S·scale_log2 - m_new·scale_log2)
//   l = alpha·l + rowsum(P),    o = alpha·o + P·V
// and at the end O = o / l, lse = m·scale + ln(l).
// Masks compare absolute positions (bottom-right aligned: query i sits at
// key position i + seqlen_k - seqlen_q; causal sees keys up to it, a local
// window from window_left before it to window_right after it); key tiles no
// row of the block can see are never loaded, so a window's time falls with
// its width. A row that sees no key gets O = 0, lse = -inf.
//
// Beyond the square dense problem (templates/fat_abi.h has the contract):
// variable-length batches (cu_seqlens), a per-sequence key count
// (seqused_k), head dims below the template's (columns past p.head_dim are
// loaded as zeros and never stored), a tanh soft-cap of the scores, and two
// decoding schedules chosen when the source is generated:
//   PACK_GQA  the query heads that share a K/V head are rows of one block
//             (row r: position r / group, head r % group of the group), so
//             each K/V tile is read once for all of them;
//   SPLITS    the block's key tiles are divided among SPLITS blocks, each
//             writing an fp32 partial output and its log-sum-exp; the second
//             kernel, fat_fwd_mma80_combine, merges them (FlashDecoding).
// Two more, which the launch completes (issue 24), come in variants of
// their own, so that every variant tuned before keeps its machine code
// (each switch is a preprocessor condition or an enumerator, never a
// namespace-scope constexpr variable, which NVRTC writes into the cubin):
//   PAGED     K and V live in a pool of pages found through a block table
//             (templates/fat_abi_kv.h has the layout and the page size
//             rule). Each 16-key group of a key tile lies in one page, whose
//             table entry one lane reads and shuffles to the copies, so a
//             tile may span pages and every power of two from 16 is a page
//             size -- 16 (vLLM's), 64, 256 (FlashAttention-2's least) alike.
//             Q is reloaded from shared memory at every k-step (the copies'
//             addresses need the registers), and with SPLITS 0 the output
//             leaves straight from registers. Masks and windows compare
//             logical key positions, as for a contiguous cache;
//   SPLITS 0  the split count comes with the launch (fat_fwd_kv_params'
//             splits), chosen for the machine from the grid and the keys
//             (core/fwd_launch.c, fat_fwd_launch_splits); the combine kernel
//             reads it too, and a launch of one split writes O itself.
// A variant that does either takes fat_fwd_kv_params as its second argument.
// One more, in variants of its own for the same reason:
//   KV8       an fp8 K/V cache (dtypes fp16-e4m3kv and bf16-e4m3kv; issue
//             24): K and V are e4m3 bytes, each with a descale factor per
//             (batch, key head) (fat_abi_fp8.h's block, the third argument;
//             Q's factor unused), Q and O in the 16-bit type. The bytes
//             stream through shared memory as the 16-bit tiles do, half the
//             size; when a tile's keys and values have landed every thread
//             widens them, 8 bytes into one 16-byte chunk of the 16-bit
//             tiles the products read (exact: every e4m3 value is an fp16
//             one, and one of at most four significant bits a bf16 one;
//             sm_89's conversion, the generator's arch rule). So the product
//             loops are the 16-bit kernel's, and each tile costs the widening
//             (two conversion instructions a pair) and one more barrier.
//             The products run in fp16 under a bf16 Q too: e4m3 widens to
//             bf16 only through fp32 (four instructions a pair), which made
//             the bf16 q's kernel no faster than the bf16 cache's where the
//             fp16 q's was ~1.7x (kernel-log p3). So a bf16 Q is turned into
//             fp16 once a block, each row times a power of two that puts its
//             largest |q| in [2^14, 2^15): exact (bf16's 8 significant bits
//             fit fp16's 11) for every element within 2^28 of its row's
//             largest, whose products are all a score can hold in fp32 beside
//             it; the row's factor goes back in with the softmax's scale. P
//             rounds to fp16 (finer than bf16), O to bf16.
//             K's factor joins the scores' scale (the soft-cap's input scale
//             where there is one, since the cap reads true scores), V's the
//             final 1/l.
//
// Parameters in double braces are substituted by generator/expand.lua; they change
// speed, never results.
#include "fat_abi.h"
#include "fat_abi_kv.h"

constexpr int kHeadDim = {{HEAD_DIM}};
constexpr int kBlockM = {{BLOCK_M}};   // query rows per thread block
constexpr int kBlockN = {{BLOCK_N}};   // keys per K/V tile
constexpr int kWarps = {{WARPS}};
constexpr int kStages = {{STAGES}};    // K/V tiles in flight (1: FlashAttention-2's schedule)
// O's type is Q's; the products' operands (kIsBf16, which fat_device.cuh's
// mma_16816 and pack2 read) are too, except under an fp8 K/V cache: fp16.
// (An enumerator: a constexpr variable more would be an object in every
// variant's cubin.)
enum : int { kOutBf16 = {{IS_BF16}} };
constexpr bool kIsBf16 = {{IS_BF16}} && !{{KV8}};
constexpr bool kIsCausal = {{IS_CAUSAL}};
constexpr bool kIsLocal = {{IS_LOCAL}};
constexpr bool kPackGqa = {{PACK_GQA}};
constexpr int kSplits = {{SPLITS}};     // blocks the keys of one query block are divided among;
                                        // 0: as many as the launch says (fat_fwd_kv_params)
// Enumerators, not constexpr variables: the variants without them keep their cubins.
enum : int { kPaged = {{PAGED}} };      // K and V in pages (fat_fwd_kv_params' block table)
// The kernels take fat_fwd_kv_params as a second argument.
#define FAT_TAKES_KV ({{PAGED}} || {{SPLITS}} == 0 || {{KV8}})

constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = kBlockM / kWarps;  // query rows owned by one warp
constexpr int kMTiles = kWarpRows / 16;      // 16-row MMA tiles per warp
constexpr int kKSteps = kHeadDim / 16;       // k-steps of S = Q·Kᵀ
constexpr int kNTiles = kBlockN / 8;         // 8-column tiles of S
constexpr int kPSteps = kBlockN / 16;        // k-steps of O += P·V
constexpr int kDTiles = kHeadDim / 8;        // 8-column tiles of O
// The 8 rows an ldmatrix phase reads must hit 8 different bank groups.
// Where a row is whole 128-byte lines (head dims that are multiples of 64)
// the tiles are swizzled, as the backward's since its b7: chunk c (16
// bytes) of row r is stored at chunk c ^ (r % 8), rows unpadded, so each
// 128-byte line a cp.async brings also lands on one line of shared memory
// (padded by a chunk, it straddled two, and the copies took about 2.3
// times the ideal shared-memory wavefronts). Other head dims pad each row
// by one chunk: an odd number of chunks a row.
constexpr bool kSwizzle = kHeadDim % 64 == 0;
constexpr int kRowPitch = kSwizzle ? kHeadDim : kHeadDim + 8;  // elements
constexpr int kChunksPerRow = kHeadDim / 8;                    // 16-byte chunks of one row
// Keep Q's MMA fragments in registers when they fit beside the accumulators;
// otherwise reload them from shared memory at every k-step. A paged
// variant always reloads: its copies' addresses (a page and a row each)
// need the registers, and a decoding block, bound by reading K and V, pays
// nothing for the extra ldmatrix of Q.
constexpr int kAccumRegs = kMTiles * (kDTiles * 4 + kNTiles * 4);
constexpr int kQFragRegs = kMTiles * kKSteps * 4;
constexpr int kRegBudget = 176;              // of 255; the rest: fragments, addresses, softmax state
constexpr bool kQInRegs = kAccumRegs + kQFragRegs <= kRegBudget && !kPaged;

static_assert(kBlockM % (16 * kWarps) == 0, "each warp owns whole 16-row tiles");
static_assert(kBlockN % 16 == 0, "P·V consumes keys 16 at a time");
static_assert(kHeadDim % 16 == 0, "the MMA k-step is 16");
static_assert(kStages >= 1, "at least one K/V buffer");
static_assert(kSplits >= 0 && kSplits <= FAT_FWD_MAX_LAUNCH_SPLITS, "the combine kernel gives each split one lane");
static_assert(!(kIsCausal && kIsLocal), "causal is the local window (-1, 0), generated apart");

#include "fwd_common.cuh"

// Two fp32 values rounded to O's type (pack2 rounds to the operands').
__device__ __forceinline__ u32 pack2_out(float lo, float hi) {
  if constexpr ((kOutBf16 != 0) == kIsBf16) {
    return pack2(lo, hi);
  } else {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
}

// Byte offset of element column col (a multiple of 8) of tile row row.
__device__ __forceinline__ u32 tile_offset(int row, int col) {
  const int chunk = col / 8;
  return (u32)(row * kRowPitch * (int)sizeof(elem_t) + (kSwizzle ? chunk ^ (row % 8) : chunk) * 16);
}

// A lane's ldmatrix address for column chunk step (known at compile time)
// past its own chunk, lane_addr being its address for step 0 in a tile
// that starts on a 128-byte boundary. Swizzled: the lane's chunk (0 or 1)
// and the steps (even) share no bits below 8, so the step's low bits are
// an xor and the rest an add: one register for every step.
__device__ __forceinline__ u32 lane_step(u32 lane_addr, int step) {
  if constexpr (kSwizzle) return (lane_addr ^ (16 * (step % 8))) + 128 * (step / 8);
  return lane_addr + 16 * step;
}

#if {{PAGED}}
// This lane's entry of the block table row PAGE_OF for the key tile of
// kRows keys from N0, of which VALID_ROWS are inside the sequence: lane q
// of each warp reads group q's (the page of keys n0 + 16q ..), the other
// lanes and the groups past the end nothing. The main loop reads a tile's
// entries a load ahead of its copies (kernel-log p5: a read beside them
// held every copy of the tile behind its round trip).
template <int kRows>
__device__ __forceinline__ int paged_lane_page(const int *page_of, int page_shift, int n0, int valid_rows, int tid) {
  const int lane = tid % 32;
  return lane < kRows / FAT_FWD_PAGE_GROUP && lane * FAT_FWD_PAGE_GROUP < valid_rows
             ? __ldg(page_of + ((n0 + lane * FAT_FWD_PAGE_GROUP) >> page_shift))
             : 0;
}

// This lane's group of the tile from key N0 (LANE_PAGE: paged_lane_page's)
// as the address of its first row in its page, from HEAD_BASE (the pool's
// first page at this block's head), elements of T apart; the lanes past
// the tile's groups hold one no copy takes. A copy then adds its row
// within the group and its column: no page arithmetic a copy (which took
// ptxas 28 instructions, 64-bit products and the strides reloaded).
template <typename T>
__device__ __forceinline__ unsigned long long paged_group_base(const T *head_base, int lane_page, int page_shift,
                                                              long long page_stride, long long row_stride, int n0,
                                                              int tid) {
  const unsigned lane = (unsigned)tid % 32, page_mask = (1u << page_shift) - 1;
  return reinterpret_cast<unsigned long long>(
      head_base + lane_page * page_stride + (long long)((n0 + lane * FAT_FWD_PAGE_GROUP) & page_mask) * row_stride);
}

// GROUP_BASE of lane FROM (paged_group_base's), in every lane.
__device__ __forceinline__ unsigned long long shfl_group_base(unsigned long long group_base, unsigned from) {
  return (unsigned long long)__shfl_sync(0xffffffffu, (u32)group_base, from) |
         (unsigned long long)__shfl_sync(0xffffffffu, (u32)(group_base >> 32), from) << 32;
}
#endif

#if {{KV8}}
#include "fat_abi_fp8.h"
// The fp8 K/V cache's byte tiles: kBlockN rows of kHeadDim e4m3 bytes,
// unpadded (lanes read them 8 bytes each, consecutive, so a warp's reads
// are whole lines), kStages of each of K and V in flight; the 16-bit tiles
// the products read are one each.
constexpr int kChunksPerRow8 = kHeadDim / 16;  // 16-byte copies of one byte row
constexpr u32 kTileBytes8 = kBlockN * kHeadDim;
static_assert(kStages > 1, "KV8 widens a tile while the next ones are in flight");
// A block of at most 16 rows (a decoding step: a group's few queries
// packed) splits each key tile among its warps instead of its rows: every
// warp works on rows 0-15 with its own share of the keys and its own
// running max, sum and output, merged through shared memory at the end
// (FlashDecoding's split, inside a block). Without it the warps past the
// rows only widen, and one warp does every product of a tile: the fp8
// kernel's critical path (kernel-log p3). Where each warp's share is whole
// 16-key steps, one 16-row tile a warp, and the merge's partials (every
// warp's but the first, one lane's registers each) fit the 16-bit tiles.
constexpr int kSplitNT = kNTiles >= 2 * kWarps ? kNTiles / kWarps : 2;  // 8-key tiles of S a warp
constexpr int kMergeFloats = kDTiles * 4 + 4;  // a lane's o, and m and l of its two rows
constexpr bool kKeySplit = kMTiles == 1 && kNTiles % (2 * kWarps) == 0 &&
                           (kWarps - 1) * 32 * kMergeFloats * 4 <= 2 * kBlockN * kRowPitch * 2;
static_assert(kHeadDim % 16 == 0, "a byte row is whole 16-byte copies");

// Two e4m3 pairs (x's bytes, lowest first) as two fp16 pairs: the
// hardware's conversion (sm_89 and newer), exact.
__device__ __forceinline__ void widen4(u32 x, u32 &lo, u32 &hi) {
  asm("{\n.reg .b16 a, b;\nmov.b32 {a, b}, %2;\ncvt.rn.f16x2.e4m3x2 %0, a;\ncvt.rn.f16x2.e4m3x2 %1, b;\n}\n"
      : "=r"(lo), "=r"(hi) : "r"(x));
}

// A bf16 Q made fp16 (the header says why), in place, a quad of lanes a
// row: lane t of the quad reads and rewrites quarter t of it. The largest
// |q| of the thread's quarter of ROW, as bf16 bits (sign cleared: the bits
// of non-negative values order as the values do, NaN's above inf's).
__device__ __forceinline__ u32 q_quarter_max(u32 q_tile, int row, int t) {
  constexpr int kCols = kHeadDim / 4;
  static_assert(kCols % 8 == 0, "a quarter row is whole 16-byte chunks");
  u32 m = 0;
#pragma unroll
  for (int c = 0; c < kCols; c += 8) {
    u32 x0, x1, x2, x3;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3) : "r"(q_tile + tile_offset(row, t * kCols + c)));
    m = __vmaxu2(m, __vmaxu2(__vmaxu2(x0 & 0x7fff7fffu, x1 & 0x7fff7fffu), __vmaxu2(x2 & 0x7fff7fffu, x3 & 0x7fff7fffu)));
  }
  return max(m & 0xffffu, m >> 16);
}

// The power of two s a row is divided by, from its largest |q| (bf16 bits
// M): the largest lands in [2^14, 2^15), well inside fp16's 65504. A row of
// zeros, or with an inf or NaN (which stay what they are), keeps s = 0; s
// stops at -100 so that 2^-s is an fp32 (a row below 2^-86 is one whose
// scores are all zero next to a softmax's rounding).
__device__ __forceinline__ int q_row_shift(u32 m) {
  const int e = (int)(m >> 7);  // the biased exponent
  return m == 0 || e == 255 ? 0 : max(e - 127 - 14, -100);
}

// Quarter t of ROW times 2^-SHIFT, rounded to fp16 (exact within 2^28 of
// the row's largest), in place.
__device__ __forceinline__ void q_quarter_to_fp16(u32 q_tile, int row, int t, int shift) {
  constexpr int kCols = kHeadDim / 4;
  const float f = __int_as_float((127 - shift) << 23);
#pragma unroll
  for (int c = 0; c < kCols; c += 8) {
    const u32 a = q_tile + tile_offset(row, t * kCols + c);
    u32 x[4];
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3]) : "r"(a));
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const float lo = __uint_as_float(x[e] << 16) * f, hi = __uint_as_float(x[e] & 0xffff0000u) * f;
      asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(x[e]) : "f"(hi), "f"(lo));
    }
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" :: "r"(a), "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]));
  }
}

// The byte tile at SRC into the 16-bit tile at DST (tile_offset's layout):
// each thread turns 8 bytes into one 16-byte chunk, so that a warp's
// stores cover whole rows of chunks (the swizzle spreads them over every
// bank) and its loads whole lines.
__device__ __forceinline__ void widen_tile(u32 dst, u32 src, int tid) {
  constexpr int kUnitsPerRow = kHeadDim / 8, kUnits = kBlockN * kUnitsPerRow;
#pragma unroll 4
  for (int i = 0; i < (kUnits + kThreads - 1) / kThreads; i++) {
    const int u = tid + i * kThreads;
    if (kUnits % kThreads == 0 || u < kUnits) {
      const int row = u / kUnitsPerRow, col = (u % kUnitsPerRow) * 8;
      u32 x0, x1, y0, y1, y2, y3;
      asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(x0), "=r"(x1) : "r"(src + row * kHeadDim + col));
      widen4(x0, y0, y1);
      widen4(x1, y2, y3);
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n"
                   :: "r"(dst + tile_offset(row, col)), "r"(y0), "r"(y1), "r"(y2), "r"(y3));
    }
  }
}

// load_tile for a byte tile of kBlockN keys (kTileBytes8's layout): each
// thread walks one 16-byte column chunk down the rows; rows at or past
// valid_rows, and columns at or past head_dim (a multiple of 16: the
// runtime's rule for these dtypes), are zero-filled.
__device__ __forceinline__ void load_tile8(u32 tile, const unsigned char *src, long long row_stride,
                                           int valid_rows, int head_dim, int tid) {
  constexpr int kRowsPerPass = kThreads / kChunksPerRow8;
  constexpr int kCopiers = kRowsPerPass * kChunksPerRow8;  // d96, d192: the last few threads idle
  const int row0 = tid / kChunksPerRow8, col = (tid % kChunksPerRow8) * 16;
  if (kCopiers < kThreads && tid >= kCopiers) return;
  const unsigned char *g = src + row0 * row_stride + col;
#pragma unroll
  for (int i = 0; i < (kBlockN + kRowsPerPass - 1) / kRowsPerPass; i++) {
    const int row = row0 + i * kRowsPerPass;
    if (kBlockN % kRowsPerPass == 0 || row < kBlockN) {
      const bool inside = row < valid_rows && col < head_dim;
      cp_async_16(tile + row * kHeadDim + col, inside ? g : src, inside ? 16 : 0);
    }
    g += kRowsPerPass * row_stride;
  }
}

#if {{PAGED}}
// load_tile_paged for a byte tile: the same groups, addresses and shuffles
// (LANE_PAGE: paged_lane_page's, read a load ahead).
__device__ __forceinline__ void load_tile8_paged(u32 tile, const unsigned char *head_base, int lane_page,
                                                 int page_shift, long long page_stride, long long row_stride,
                                                 int n0, int valid_rows, int head_dim, int tid) {
  static_assert(kBlockN % FAT_FWD_PAGE_GROUP == 0 && kBlockN / FAT_FWD_PAGE_GROUP <= 32,
                "a lane holds each group's page");
  const unsigned long long group_base =
      paged_group_base(head_base, lane_page, page_shift, page_stride, row_stride, n0, tid);
  constexpr int kRowsPerPass = kThreads / kChunksPerRow8;
  constexpr int kCopiers = kRowsPerPass * kChunksPerRow8;
  const int row0 = (int)((unsigned)tid / kChunksPerRow8), col = (int)((unsigned)tid % kChunksPerRow8) * 16;
  const bool copies = kCopiers == kThreads || tid < kCopiers;
#pragma unroll
  for (int i = 0; i < (kBlockN + kRowsPerPass - 1) / kRowsPerPass; i++) {
    const int row = row0 + i * kRowsPerPass;
    const unsigned from = (unsigned)row / FAT_FWD_PAGE_GROUP % 32;  // every lane shuffles
    const unsigned long long base = shfl_group_base(group_base, from);
    if (copies && (kBlockN % kRowsPerPass == 0 || row < kBlockN)) {
      const bool inside = row < valid_rows && col < head_dim;
      const unsigned char *g = reinterpret_cast<const unsigned char *>(base) +
                               (long long)((unsigned)row % FAT_FWD_PAGE_GROUP) * row_stride + col;
      cp_async_16(tile + row * kHeadDim + col, inside ? g : head_base, inside ? 16 : 0);
    }
  }
}
#endif
#endif

// Copies kRows rows of one head (kHeadDim elements each) into a shared-memory
// tile (tile_offset's layout); rows at or past valid_rows, and columns at or past
// head_dim, are zero-filled. Each thread walks one column chunk down the rows
// with a running pointer, so the loop keeps one address live, not one per row
// it copies.
template <int kRows>
__device__ __forceinline__ void load_tile(u32 tile, const elem_t *src, long long row_stride,
                                          int valid_rows, int head_dim, int tid) {
  constexpr int kChunks = kRows * kChunksPerRow;
  if constexpr (kThreads % kChunksPerRow == 0) {
    constexpr int kRowsPerPass = kThreads / kChunksPerRow;
    const int row0 = tid / kChunksPerRow, col = (tid % kChunksPerRow) * 8;
    const elem_t *g = src + row0 * row_stride + col;
    // Passes of 8 rows keep the swizzle's row % 8: one offset for all.
    const u32 dst = tile + tile_offset(row0, col);
#pragma unroll
    for (int i = 0; i < (kRows + kRowsPerPass - 1) / kRowsPerPass; i++) {
      const int row = row0 + i * kRowsPerPass;
      if (kRows % kRowsPerPass == 0 || row < kRows) {
        const bool inside = row < valid_rows && col < head_dim;
        const u32 d = kRowsPerPass % 8 == 0 ? dst + i * kRowsPerPass * kRowPitch * sizeof(elem_t)
                                            : tile + tile_offset(row, col);
        cp_async_16(d, inside ? g : src, inside ? 16 : 0);
      }
      g += kRowsPerPass * row_stride;
    }
  } else {
#pragma unroll
    for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; i++) {
      const int c = tid + i * kThreads;
      if (kChunks % kThreads == 0 || c < kChunks) {
        const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
        const bool inside = row < valid_rows && col < head_dim;
        cp_async_16(tile + tile_offset(row, col), inside ? src + row * row_stride + col : src, inside ? 16 : 0);
      }
    }
  }
}

#if {{PAGED}}
// load_tile for a key tile of a paged K or V: tile row r is key n0 + r of
// the sequence, row (n0 + r) & page_mask of its page, pages page_stride
// elements apart from head_base (the pool's first page at this block's
// K/V head). A page holds at least FAT_FWD_PAGE_GROUP keys (a power of two,
// as is the page), so each FAT_FWD_PAGE_GROUP-key group of the tile lies in
// one page: lane q of each warp holds group q's entry of the sequence's
// block table row (LANE_PAGE, paged_lane_page's), and every copy takes its
// row's page from that lane by a shuffle -- one table read a group, not one
// a copied row (which ptxas hoisted, one register each, into spills). A
// group at or past valid_rows (keys past the sequence's end, whose entries
// may name no page) is never read; its rows, and columns past head_dim, are
// zero-filled.
template <int kRows>
__device__ __forceinline__ void load_tile_paged(u32 tile, const elem_t *head_base, int lane_page, int page_shift,
                                                long long page_stride, long long row_stride, int n0,
                                                int valid_rows, int head_dim, int tid) {
  static_assert(kRows % FAT_FWD_PAGE_GROUP == 0 && kRows / FAT_FWD_PAGE_GROUP <= 32,
                "a lane holds each group's page");
  const unsigned long long group_base =
      paged_group_base(head_base, lane_page, page_shift, page_stride, row_stride, n0, tid);
  // Each thread walks one column chunk down the rows, as load_tile does;
  // where the threads are no multiple of a row's chunks (d96, d192) the
  // last few only shuffle, so that no copy needs a row and column of its
  // own (ptxas kept one each live, and spilled them).
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  constexpr int kCopiers = kRowsPerPass * kChunksPerRow;
  const int row0 = (int)((unsigned)tid / kChunksPerRow), col = (int)((unsigned)tid % kChunksPerRow) * 8;
  const bool copies = kCopiers == kThreads || tid < kCopiers;
  const u32 dst = tile + tile_offset(row0, col);
  if constexpr (kCopiers == kThreads && FAT_FWD_PAGE_GROUP % kRowsPerPass == 0) {
    // A pass's rows lie in one group (row0 < kRowsPerPass), so a thread's
    // rows of group g are its passes g·kPerGroup ..: one shuffle of the
    // group's address a group, not one a copy (at d128, 128 threads: 16
    // shuffle pairs a tile where there were 32 -- the paged kernel ran 140
    // SHFL in its loop to the contiguous one's none; kernel-log p7).
    constexpr int kPerGroup = FAT_FWD_PAGE_GROUP / kRowsPerPass;
#pragma unroll
    for (int g = 0; g < kRows / FAT_FWD_PAGE_GROUP; g++) {
      const elem_t *row_g = reinterpret_cast<const elem_t *>(shfl_group_base(group_base, g)) + (long long)row0 * row_stride + col;
#pragma unroll
      for (int r = 0; r < kPerGroup; r++) {
        const int i = g * kPerGroup + r, row = row0 + i * kRowsPerPass;
        const bool inside = row < valid_rows && col < head_dim;
        const u32 d = kRowsPerPass % 8 == 0 ? dst + i * kRowsPerPass * kRowPitch * sizeof(elem_t)
                                            : tile + tile_offset(row, col);
        const elem_t *g_row = row_g + (long long)(r * kRowsPerPass) * row_stride;
        cp_async_16(d, inside ? g_row : head_base, inside ? 16 : 0);
      }
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < (kRows + kRowsPerPass - 1) / kRowsPerPass; i++) {
    const int row = row0 + i * kRowsPerPass;
    const unsigned from = (unsigned)row / FAT_FWD_PAGE_GROUP % 32;  // every lane shuffles
    const unsigned long long base = shfl_group_base(group_base, from);
    if (copies && (kRows % kRowsPerPass == 0 || row < kRows)) {
      const bool inside = row < valid_rows && col < head_dim;
      const u32 d = kRowsPerPass % 8 == 0 ? dst + i * kRowsPerPass * kRowPitch * sizeof(elem_t)
                                          : tile + tile_offset(row, col);
      const elem_t *g = reinterpret_cast<const elem_t *>(base) +
                        (long long)((unsigned)row % FAT_FWD_PAGE_GROUP) * row_stride + col;
      cp_async_16(d, inside ? g : head_base, inside ? 16 : 0);
    }
  }
}
#endif

// Grid: (ceil(rows / kBlockM), kPackGqa ? heads_k : heads, batch · kSplits),
// rows = seqlen_q · (kPackGqa ? heads / heads_k : 1); SPLITS 0: kv.splits
// in place of kSplits.
#if FAT_TAKES_KV
// One block an SM is all ptxas need plan for: left to itself it capped
// some paged variants at 168 registers (three blocks) and spilled.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
#if {{KV8}}
fat_fwd_mma80(const fat_fwd_params p, const fat_fwd_kv_params kv, const fat_fwd_fp8_params fp8) {
#else
fat_fwd_mma80(const fat_fwd_params p, const fat_fwd_kv_params kv) {
#endif
#else
extern "C" __global__ void __launch_bounds__(kThreads)
fat_fwd_mma80(const fat_fwd_params p) {
#endif
  extern __shared__ __align__(128) unsigned char smem[];  // whole lines: the swizzle's xor
  // Shared-memory addresses as 32-bit offsets, so that every operand address
  // below is one base register plus a constant.
  constexpr u32 kTileBytesN = kBlockN * kRowPitch * sizeof(elem_t);
  elem_t *q_smem = reinterpret_cast<elem_t *>(smem);
  const u32 q_base = smem_u32(smem);
  const u32 k_base = q_base + kBlockM * kRowPitch * sizeof(elem_t);  // kStages tiles
#if {{KV8}}
  // One widened tile each of K and V, then the byte rings.
  const u32 v_base = k_base + kTileBytesN;
  const u32 k8_base = v_base + kTileBytesN, v8_base = k8_base + kStages * kTileBytes8;
#else
  const u32 v_base = k_base + kStages * kTileBytesN;                 // kStages tiles
#endif

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;  // MMA fragment coordinates: row group, column pair
  // Causal blocks further down see more keys: launch them first.
  const int m_block = kIsCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
#if {{SPLITS}} == 0
  const int n_splits = kv.splits;  // chosen at launch
#else
  constexpr int n_splits = kSplits;
#endif
  const int batch = blockIdx.z / n_splits, split = blockIdx.z % n_splits;
  const int group = p.heads / p.heads_k;
  const int head_k = kPackGqa ? blockIdx.y : blockIdx.y / group;
  const Sequence seq = sequence_of(p, batch);
  // Rows of this block's (batch, head) or, packed, of its K/V head's group.
  const int rows = kPackGqa ? seq.seqlen_q * group : seq.seqlen_q;
  const int m0 = m_block * kBlockM;
  if (m0 >= rows) return;  // a shorter sequence of a variable-length batch
  const int row_end = min(m0 + kBlockM, rows);
  // Query position and head of block row r.
  auto position = [&](int r) { return kPackGqa ? (m0 + r) / group : m0 + r; };
  auto head_of = [&](int r) { return kPackGqa ? head_k * group + (m0 + r) % group : (int)blockIdx.y; };
  const int diag = seq.seqlen_k - seq.seqlen_q;  // bottom-right alignment
  const int first_pos = position(0), last_pos = position(row_end - 1 - m0);

  // Keys [n_begin, n_end) are visible to at least one row of this block.
  int n_begin = 0, n_end = seq.seqlen_k;
  if (kIsCausal) n_end = min(n_end, last_pos + diag + 1);
  if (kIsLocal && p.window_right >= 0) n_end = min(n_end, last_pos + diag + p.window_right + 1);
  if (kIsLocal && p.window_left >= 0) n_begin = max(0, first_pos + diag - p.window_left);
  int tile_begin = n_begin / kBlockN;
  int tile_end = n_end > n_begin ? (n_end + kBlockN - 1) / kBlockN : tile_begin;
  if constexpr (kSplits != 1) {  // this block's share of the key tiles
    const int per_split = (tile_end - tile_begin + n_splits - 1) / n_splits;
    tile_begin = min(tile_end, tile_begin + split * per_split);
    tile_end = min(tile_end, tile_begin + per_split);
  }
  const int n_tiles = tile_end - tile_begin;

#if {{PAGED}} && {{KV8}}
  // The byte pools' first pages at this block's K/V head, as below.
  const unsigned char *k_g = static_cast<const unsigned char *>(p.k) + head_k * p.k_head_stride;
  const unsigned char *v_g = static_cast<const unsigned char *>(p.v) + head_k * p.v_head_stride;
  const int *page_of = kv.block_table + (long long)batch * kv.block_table_stride;
  const int head_dim = p.head_dim;

  // Each ring's table entries for the tile it loads next, read one load
  // ahead (the 16-bit path's, below).
  auto lane_page = [&](int j) {
    const int n0 = (tile_begin + j) * kBlockN;
    return paged_lane_page<kBlockN>(page_of, kv.page_shift, n0, j < n_tiles ? seq.seqlen_k - n0 : 0, tid);
  };
  int k_pages = lane_page(0), v_pages = k_pages;
  auto load_k = [&](int j) {  // the block's j-th key tile, into its byte ring slot
    if (j < n_tiles) {
      const int n0 = (tile_begin + j) * kBlockN, pages = k_pages;
      k_pages = lane_page(j + 1);
      load_tile8_paged(k8_base + (j % kStages) * kTileBytes8, k_g, pages, kv.page_shift, p.k_batch_stride,
                       p.k_row_stride, n0, seq.seqlen_k - n0, head_dim, tid);
    }
    cp_async_commit();
  };
  auto load_v = [&](int j) {
    if (j < n_tiles) {
      const int n0 = (tile_begin + j) * kBlockN, pages = v_pages;
      v_pages = lane_page(j + 1);
      load_tile8_paged(v8_base + (j % kStages) * kTileBytes8, v_g, pages, kv.page_shift, p.v_batch_stride,
                       p.v_row_stride, n0, seq.seqlen_k - n0, head_dim, tid);
    }
    cp_async_commit();
  };
#elif {{KV8}}
  const unsigned char *k_g = static_cast<const unsigned char *>(p.k) + seq.k_off + head_k * p.k_head_stride;
  const unsigned char *v_g = static_cast<const unsigned char *>(p.v) + seq.v_off + head_k * p.v_head_stride;
  const int head_dim = p.head_dim;

  auto load_k = [&](int j) {  // the block's j-th key tile, into its byte ring slot
    if (j < n_tiles) {
      const int n0 = (tile_begin + j) * kBlockN;
      load_tile8(k8_base + (j % kStages) * kTileBytes8, k_g + n0 * p.k_row_stride, p.k_row_stride,
                 seq.seqlen_k - n0, head_dim, tid);
    }
    cp_async_commit();
  };
  auto load_v = [&](int j) {
    if (j < n_tiles) {
      const int n0 = (tile_begin + j) * kBlockN;
      load_tile8(v8_base + (j % kStages) * kTileBytes8, v_g + n0 * p.v_row_stride, p.v_row_stride,
                 seq.seqlen_k - n0, head_dim, tid);
    }
    cp_async_commit();
  };
#elif {{PAGED}}
  // The pools' first pages at this block's K/V head, and the sequence's
  // row of the block table; the batch strides step from page to page.
  const elem_t *k_g = static_cast<const elem_t *>(p.k) + head_k * p.k_head_stride;
  const elem_t *v_g = static_cast<const elem_t *>(p.v) + head_k * p.v_head_stride;
  const int *page_of = kv.block_table + (long long)batch * kv.block_table_stride;
  const int head_dim = p.head_dim;

  // Each ring's table entries (paged_lane_page's) for the tile it loads
  // next, read one load ahead: load_k and load_v each take tiles 0, 1, ...
  // in turn, and a tile's copies then never wait for its entries.
  auto lane_page = [&](int j) {  // tile j's, none past the block's tiles
    const int n0 = (tile_begin + j) * kBlockN;
    return paged_lane_page<kBlockN>(page_of, kv.page_shift, n0, j < n_tiles ? seq.seqlen_k - n0 : 0, tid);
  };
  int k_pages = lane_page(0), v_pages = k_pages;
  auto load_k = [&](int j) {  // the block's j-th key tile
    if (j < n_tiles) {
      const int n0 = (tile_begin + j) * kBlockN, pages = k_pages;
      k_pages = lane_page(j + 1);
      load_tile_paged<kBlockN>(k_base + (j % kStages) * kTileBytesN, k_g, pages, kv.page_shift, p.k_batch_stride,
                               p.k_row_stride, n0, seq.seqlen_k - n0, head_dim, tid);
    }
    cp_async_commit();  // empty groups keep the wait counts uniform
  };
  auto load_v = [&](int j) {
    if (j < n_tiles) {
      const int n0 = (tile_begin + j) * kBlockN, pages = v_pages;
      v_pages = lane_page(j + 1);
      load_tile_paged<kBlockN>(v_base + (j % kStages) * kTileBytesN, v_g, pages, kv.page_shift, p.v_batch_stride,
                               p.v_row_stride, n0, seq.seqlen_k - n0, head_dim, tid);
    }
    cp_async_commit();
  };
#else
  const elem_t *k_g = static_cast<const elem_t *>(p.k) + seq.k_off + head_k * p.k_head_stride;
  const elem_t *v_g = static_cast<const elem_t *>(p.v) + seq.v_off + head_k * p.v_head_stride;
  const int head_dim = p.head_dim;

  auto load_k = [&](int j) {  // the block's j-th key tile
    if (j < n_tiles) {
      const int n0 = (tile_begin + j) * kBlockN;
      load_tile<kBlockN>(k_base + (j % kStages) * kTileBytesN, k_g + n0 * p.k_row_stride,
                         p.k_row_stride, seq.seqlen_k - n0, head_dim, tid);
    }
    cp_async_commit();  // empty groups keep the wait counts uniform
  };
  auto load_v = [&](int j) {
    if (j < n_tiles) {
      const int n0 = (tile_begin + j) * kBlockN;
      load_tile<kBlockN>(v_base + (j % kStages) * kTileBytesN, v_g + n0 * p.v_row_stride,
                         p.v_row_stride, seq.seqlen_k - n0, head_dim, tid);
    }
    cp_async_commit();
  };
#endif

  // Prologue: Q with the first K tile in one group, then the tiles ahead.
  const elem_t *q_all = static_cast<const elem_t *>(p.q) + seq.q_off;
  if constexpr (kPackGqa) {
    // Each row has its own (position, head): one address per chunk. Q is
    // loaded once per block, so the divisions do not matter.
    constexpr int kChunks = kBlockM * kChunksPerRow;
#pragma unroll
    for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; i++) {
      const int c = tid + i * kThreads;
      if (kChunks % kThreads == 0 || c < kChunks) {
        const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
        const bool inside = m0 + r < rows && col < head_dim;
        const elem_t *src = q_all + (long long)position(r) * p.q_row_stride + head_of(r) * p.q_head_stride + col;
        cp_async_16(q_base + tile_offset(r, col), inside ? src : q_all, inside ? 16 : 0);
      }
    }
  } else {
    load_tile<kBlockM>(q_base, q_all + blockIdx.y * p.q_head_stride + (long long)m0 * p.q_row_stride,
                       p.q_row_stride, rows - m0, head_dim, tid);
  }
  load_k(0);
  if constexpr (kStages > 1) {
    load_v(0);
    for (int s = 1; s < kStages - 1; s++) {
      load_k(s);
      load_v(s);
    }
  }

#if {{KV8}}
  // Split the keys, not the rows, when the block's rows fit one warp's.
  const bool key_split = kKeySplit && row_end - m0 <= 16;
  const int warp_row0 = key_split ? 0 : warp * kWarpRows;  // first row of this warp inside the block
#else
  const int warp_row0 = warp * kWarpRows;  // first row of this warp inside the block
#endif
  float o[kMTiles][kDTiles][4];            // unnormalised output
  float row_max[kMTiles][2];               // m, raw scores (rows g and g+8)
  float row_sum[kMTiles][2];               // l, this thread's partial sum
  int row_pos[kMTiles][2];                 // query positions of those rows
#pragma unroll
  for (int mt = 0; mt < kMTiles; mt++) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; dt++)
#pragma unroll
      for (int e = 0; e < 4; e++) o[mt][dt][e] = 0.f;
    row_max[mt][0] = row_max[mt][1] = neg_inf();
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
    row_pos[mt][0] = position(warp_row0 + mt * 16 + g);
    row_pos[mt][1] = position(warp_row0 + mt * 16 + g + 8);
  }
  u32 q_frag[kQInRegs ? kMTiles : 1][kQInRegs ? kKSteps : 1][4];

  // This lane's ldmatrix addresses (bytes) for column step 0, K's and V's
  // before their tile's base; every row a lane addresses is lane % 8
  // modulo 8 (warp_row0 is a multiple of 16).
  constexpr u32 kPitchBytes = kRowPitch * sizeof(elem_t);
  const u32 q_lane = q_base + tile_offset(warp_row0 + lane % 16, (lane / 16) * 8);            // Q as row-major A
  const u32 kb_lane = tile_offset((lane % 8) + (lane / 16) * 8, ((lane / 8) % 2) * 8);        // K as B
  const u32 vb_lane = tile_offset((lane % 8) + ((lane / 8) % 2) * 8, (lane / 16) * 8);        // V as B, transposed
#if {{KV8}}
  // K's and V's factors for this block's (batch, key head) (fat_abi_fp8.h;
  // NULL stands for 1). K's scales the raw scores: into the softmax's scale
  // and the log-sum-exp's, or, with a soft-cap (whose output is a true
  // score), into the cap's input scale. V's scales O, with 1/l.
  auto descale = [&](int i) {
    return fp8.descale[i] ? fp8.descale[i][(long long)batch * fp8.batch_stride[i] + head_k * fp8.head_stride[i]]
                          : 1.f;
  };
  const float k_descale = descale(1), v_descale = descale(2);
  const bool softcap = p.softcap_in != 0.f;
  const float scale_log2 = softcap ? p.scale_log2 : p.scale_log2 * k_descale;
  const float softcap_in = p.softcap_in * k_descale;
  const float lse_scale = softcap ? p.softmax_scale : p.softmax_scale * k_descale;
#if {{IS_BF16}}
  // Q's rows as fp16 times 2^-shift (the header): each row's 2^shift
  // multiplies its raw scores back, in the cap's input scale where there is
  // a cap and in the softmax's otherwise. row_a is that one factor of a
  // row's raw scores: two registers where the scale and the cap's were (the
  // other scales are read from the parameters again: with a cap the
  // softmax's is p's, and lse's is row_a's in the natural log).
  float row_a[kMTiles][2];
  {
    // Q (and K[0]) landed; its rows scanned by every warp that reads them,
    // then rewritten by their one owner once every warp has (split keys:
    // every warp reads rows 0-15, warp 0 owns them). Before the loop, whose
    // first barrier orders the rewrite before any product reads it, and
    // whose registers it leaves alone.
    cp_async_wait<2 * kStages - 3>();
    __syncthreads();
    int q_shift[kMTiles][2];
#pragma unroll
    for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        u32 m = q_quarter_max(q_base, warp_row0 + mt * 16 + g + 8 * h, t);
        m = max(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = max(m, __shfl_xor_sync(0xffffffffu, m, 2));
        q_shift[mt][h] = q_row_shift(m);
        row_a[mt][h] = (softcap ? softcap_in : scale_log2) * __int_as_float((127 + q_shift[mt][h]) << 23);
      }
    __syncthreads();
    if (!key_split || warp == 0) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) q_quarter_to_fp16(q_base, warp_row0 + mt * 16 + g + 8 * h, t, q_shift[mt][h]);
    }
  }
#define FAT_SCALE_LOG2(mt, h) (softcap ? p.scale_log2 : row_a[mt][h])
#define FAT_SOFTCAP_IN(mt, h) row_a[mt][h]
#define FAT_LSE_SCALE(mt, h) (softcap ? p.softmax_scale : row_a[mt][h] * (p.softmax_scale / p.scale_log2))
#else
#define FAT_SCALE_LOG2(mt, h) scale_log2
#define FAT_SOFTCAP_IN(mt, h) softcap_in
#define FAT_LSE_SCALE(mt, h) lse_scale
#endif
#define FAT_INV_L(l) ((l) > 0.f ? v_descale / (l) : 0.f)
#else
  const float scale_log2 = p.scale_log2;
  const bool softcap = p.softcap_in != 0.f;
// Macros, so that the 16-bit variants' expressions stay token for token.
#define FAT_SCALE_LOG2(mt, h) scale_log2
#define FAT_SOFTCAP_IN(mt, h) p.softcap_in
#define FAT_LSE_SCALE(mt, h) p.softmax_scale
#define FAT_INV_L(l) ((l) > 0.f ? 1.f / (l) : 0.f)
#endif
  // The window's bounds as offsets from a row's position (unbounded: out of reach).
  const int win_hi = kIsLocal && p.window_right >= 0 ? diag + p.window_right : 0x3fffffff;
  const int win_lo = kIsLocal && p.window_left >= 0 ? diag - p.window_left : -0x3fffffff;

  for (int j = 0; j < n_tiles; j++) {
    const int n0 = (tile_begin + j) * kBlockN;
#if {{KV8}}
    const u32 k_tile = k_base + kb_lane;
    const u32 v_tile = v_base + vb_lane;
    cp_async_wait<2 * kStages - 4>();  // K[j] and V[j] (and Q) landed
    __syncthreads();                   // ... in every thread's copies; tile j-1's products are done
    // The byte slots of tile j-1 are free (widened last iteration).
    load_k(j + kStages - 1);
    load_v(j + kStages - 1);
    widen_tile(k_base, k8_base + (j % kStages) * kTileBytes8, tid);
    widen_tile(v_base, v8_base + (j % kStages) * kTileBytes8, tid);
    __syncthreads();
    // A warp whose rows all lie past the block's (a decoding step packs a
    // group's few queries: GQA 4 at one query fills 4 of 64 rows) only
    // widens: its products, a quarter of a tile's instructions each, were
    // the fp8 kernel's issue-bound work (kernel-log p3).
    if (m0 + warp_row0 >= row_end) continue;
#else
    const u32 k_tile = k_base + (j % kStages) * kTileBytesN + kb_lane;
    const u32 v_tile = v_base + (j % kStages) * kTileBytesN + vb_lane;

    if constexpr (kStages == 1) {
      __syncthreads();  // every warp is done with the previous V tile
      load_v(j);
      cp_async_wait<1>();  // K[j] (and Q) landed
    } else {
      cp_async_wait<2 * kStages - 3>();  // K[j] (and Q) landed
    }
    __syncthreads();
    if constexpr (kStages > 1) {
      // The buffer of tile j-1 is free: every warp has passed the barrier.
      load_k(j + kStages - 1);
      load_v(j + kStages - 1);
    }
#endif
    if constexpr (kQInRegs) {
      if (j == 0) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
          for (int ks = 0; ks < kKSteps; ks++)
            ldmatrix_x4(q_frag[mt][ks], lane_step(q_lane, 2 * ks) + mt * 16 * kPitchBytes);
      }
    }
#if {{KV8}}
    if constexpr (kKeySplit) {
      if (key_split) {
        // This warp's keys of the tile: kSplitNT 8-key tiles from key0.
        const int pair0 = warp * (kSplitNT / 2), key0 = n0 + warp * kSplitNT * 8;
        float sw[kSplitNT][4];
#pragma unroll
        for (int nt = 0; nt < kSplitNT; nt++)
#pragma unroll
          for (int e = 0; e < 4; e++) sw[nt][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < kKSteps; ks++) {
          u32 a[4];
          if constexpr (kQInRegs) {
#pragma unroll
            for (int e = 0; e < 4; e++) a[e] = q_frag[0][ks][e];
          } else {
            ldmatrix_x4(a, lane_step(q_lane, 2 * ks));
          }
#pragma unroll
          for (int np = 0; np < kSplitNT / 2; np++) {
            u32 b[4];
            ldmatrix_x4(b, lane_step(k_tile, 2 * ks) + (pair0 + np) * 16 * kPitchBytes);
            mma_16816(sw[2 * np], a, b[0], b[1]);
            mma_16816(sw[2 * np + 1], a, b[2], b[3]);
          }
        }
        if (softcap) {
#pragma unroll
          for (int nt = 0; nt < kSplitNT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) sw[nt][e] = p.softcap_out * fast_tanh(sw[nt][e] * FAT_SOFTCAP_IN(0, e / 2));
        }
        // The mask, as below, on this warp's keys.
        if (n0 + kBlockN > seq.seqlen_k || (kIsCausal && n0 + kBlockN - 1 > first_pos + diag) ||
            (kIsLocal && (n0 + kBlockN - 1 > first_pos + win_hi || n0 < last_pos + win_lo))) {
#pragma unroll
          for (int nt = 0; nt < kSplitNT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
              const int pos = row_pos[0][e / 2];
              const int col = key0 + nt * 8 + 2 * t + (e % 2);
              if (col >= seq.seqlen_k || (kIsCausal && col > pos + diag) ||
                  (kIsLocal && (col > pos + win_hi || col < pos + win_lo)))
                sw[nt][e] = neg_inf();
            }
        }
        // This warp's online softmax over its keys, as below.
        u32 pw[kSplitNT / 2][4];
#pragma unroll
        for (int h = 0; h < 2; h++) {
          float tile_max = neg_inf();
#pragma unroll
          for (int nt = 0; nt < kSplitNT; nt++) tile_max = fmaxf(tile_max, fmaxf(sw[nt][2 * h], sw[nt][2 * h + 1]));
          tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
          tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
          const float m_old = row_max[0][h];
          const float m_new = fmaxf(m_old, tile_max);
          row_max[0][h] = m_new;
          const float sl2 = FAT_SCALE_LOG2(0, h);
          const float m_scaled = m_new == neg_inf() ? 0.f : m_new * sl2;
          const float alpha = fast_exp2(m_old * sl2 - m_scaled);
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < kSplitNT; nt++) {
            const float p0 = fast_exp2(fmaf(sw[nt][2 * h], sl2, -m_scaled));
            const float p1 = fast_exp2(fmaf(sw[nt][2 * h + 1], sl2, -m_scaled));
            sum += p0 + p1;
            pw[nt / 2][h + 2 * (nt % 2)] = pack2(p0, p1);
          }
          row_sum[0][h] = row_sum[0][h] * alpha + sum;
#pragma unroll
          for (int dt = 0; dt < kDTiles; dt++) {
            o[0][dt][2 * h] *= alpha;
            o[0][dt][2 * h + 1] *= alpha;
          }
        }
        // O += P·V over this warp's keys.
#pragma unroll
        for (int kk = 0; kk < kSplitNT / 2; kk++) {
#pragma unroll
          for (int dp = 0; dp < kDTiles / 2; dp++) {
            u32 b[4];
            ldmatrix_x4_trans(b, lane_step(v_tile, 2 * dp) + (pair0 + kk) * 16 * kPitchBytes);
            mma_16816(o[0][2 * dp], pw[kk], b[0], b[1]);
            mma_16816(o[0][2 * dp + 1], pw[kk], b[2], b[3]);
          }
        }
        continue;
      }
    }
#endif

    // S = Q·Kᵀ
    float s[kMTiles][kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
      for (int nt = 0; nt < kNTiles; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ks++) {
      u32 a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; mt++) {
        if constexpr (kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; e++) a[mt][e] = q_frag[mt][ks][e];
        } else {
          ldmatrix_x4(a[mt], lane_step(q_lane, 2 * ks) + mt * 16 * kPitchBytes);
        }
      }
#pragma unroll
      for (int np = 0; np < kNTiles / 2; np++) {
        u32 b[4];
        ldmatrix_x4(b, lane_step(k_tile, 2 * ks) + np * 16 * kPitchBytes);
#pragma unroll
        for (int mt = 0; mt < kMTiles; mt++) {
          mma_16816(s[mt][2 * np], a[mt], b[0], b[1]);
          mma_16816(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
    if constexpr (kStages == 1) {
      __syncthreads();  // every warp is done with this K tile
      load_k(j + 1);
    }

    // Soft-cap, on the raw scores (fat_abi.h says why they stay raw).
    if (softcap) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
        for (int nt = 0; nt < kNTiles; nt++)
#pragma unroll
          for (int e = 0; e < 4; e++) s[mt][nt][e] = p.softcap_out * fast_tanh(s[mt][nt][e] * FAT_SOFTCAP_IN(mt, e / 2));
    }

    // Mask by absolute position: keys past the end, after the query's
    // diagonal, or outside its window. Only tiles that cross a boundary pay.
    const bool needs_mask = n0 + kBlockN > seq.seqlen_k ||
                            (kIsCausal && n0 + kBlockN - 1 > first_pos + diag) ||
                            (kIsLocal && (n0 + kBlockN - 1 > first_pos + win_hi || n0 < last_pos + win_lo));
    if (needs_mask) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
        for (int nt = 0; nt < kNTiles; nt++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int pos = row_pos[mt][e / 2];
            const int col = n0 + nt * 8 + 2 * t + (e % 2);
            if (col >= seq.seqlen_k || (kIsCausal && col > pos + diag) ||
                (kIsLocal && (col > pos + win_hi || col < pos + win_lo)))
              s[mt][nt][e] = neg_inf();
          }
    }

    // Online softmax: raise the running max, rescale l and o by alpha, and
    // round P to the element type at once: the S accumulators of two 8-key
    // tiles form one A fragment of P·V.
    u32 p_frag[kMTiles][kPSteps][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; mt++) {
#pragma unroll
      for (int h = 0; h < 2; h++) {  // rows g and g+8
        float tile_max = neg_inf();
#pragma unroll
        for (int nt = 0; nt < kNTiles; nt++)
          tile_max = fmaxf(tile_max, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float m_old = row_max[mt][h];
        const float m_new = fmaxf(m_old, tile_max);
        row_max[mt][h] = m_new;
        // A row that has seen no key yet keeps m = -inf: never form -inf - -inf.
        const float sl2 = FAT_SCALE_LOG2(mt, h);
        const float m_scaled = m_new == neg_inf() ? 0.f : m_new * sl2;
        const float alpha = fast_exp2(m_old * sl2 - m_scaled);  // exp2(-inf) = 0
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; nt++) {
          const float p0 = fast_exp2(fmaf(s[mt][nt][2 * h], sl2, -m_scaled));
          const float p1 = fast_exp2(fmaf(s[mt][nt][2 * h + 1], sl2, -m_scaled));
          sum += p0 + p1;
          p_frag[mt][nt / 2][h + 2 * (nt % 2)] = pack2(p0, p1);
        }
        row_sum[mt][h] = row_sum[mt][h] * alpha + sum;
#pragma unroll
        for (int dt = 0; dt < kDTiles; dt++) {
          o[mt][dt][2 * h] *= alpha;
          o[mt][dt][2 * h + 1] *= alpha;
        }
      }
    }

#if !{{KV8}}
    if constexpr (kStages == 1)
      cp_async_wait<1>();  // V[j] landed
    else
      cp_async_wait<2 * kStages - 2>();
    __syncthreads();
#endif

    // O += P·V
#pragma unroll
    for (int kk = 0; kk < kPSteps; kk++) {
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; dp++) {
        u32 b[4];
        ldmatrix_x4_trans(b, lane_step(v_tile, 2 * dp) + kk * 16 * kPitchBytes);
#pragma unroll
        for (int mt = 0; mt < kMTiles; mt++) {
          mma_16816(o[mt][2 * dp], p_frag[mt][kk], b[0], b[1]);
          mma_16816(o[mt][2 * dp + 1], p_frag[mt][kk], b[2], b[3]);
        }
      }
    }
  }

  cp_async_wait<0>();
#if {{KV8}}
  if constexpr (kKeySplit) {
    if (key_split) {
      // Merge the warps' partials into the first warp's registers: the
      // others leave theirs, lane by lane in their register order, in the
      // 16-bit tiles (every warp is past its last product), and return.
      __syncthreads();
      float *merge = reinterpret_cast<float *>(smem + (k_base - q_base));
      if (warp > 0) {
        float *mine = merge + ((warp - 1) * 32 + lane) * kMergeFloats;
#pragma unroll
        for (int dt = 0; dt < kDTiles; dt++)
#pragma unroll
          for (int e = 0; e < 4; e++) mine[dt * 4 + e] = o[0][dt][e];
        mine[kDTiles * 4 + 0] = row_max[0][0];
        mine[kDTiles * 4 + 1] = row_max[0][1];
        mine[kDTiles * 4 + 2] = row_sum[0][0];
        mine[kDTiles * 4 + 3] = row_sum[0][1];
      }
      __syncthreads();
      if (warp > 0) return;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        float m = row_max[0][h];
        for (int w = 1; w < kWarps; w++) m = fmaxf(m, merge[((w - 1) * 32 + lane) * kMergeFloats + kDTiles * 4 + h]);
        const float sl2 = FAT_SCALE_LOG2(0, h);
        const float m_scaled = m == neg_inf() ? 0.f : m * sl2;
        const float a0 = fast_exp2(row_max[0][h] * sl2 - m_scaled);  // exp2(-inf) = 0
        row_sum[0][h] *= a0;
#pragma unroll
        for (int dt = 0; dt < kDTiles; dt++) {
          o[0][dt][2 * h] *= a0;
          o[0][dt][2 * h + 1] *= a0;
        }
        for (int w = 1; w < kWarps; w++) {
          const float *theirs = merge + ((w - 1) * 32 + lane) * kMergeFloats;
          const float a = fast_exp2(theirs[kDTiles * 4 + h] * sl2 - m_scaled);
          row_sum[0][h] += a * theirs[kDTiles * 4 + 2 + h];
#pragma unroll
          for (int dt = 0; dt < kDTiles; dt++) {
            o[0][dt][2 * h] += a * theirs[dt * 4 + 2 * h];
            o[0][dt][2 * h + 1] += a * theirs[dt * 4 + 2 * h + 1];
          }
        }
        row_max[0][h] = m;
      }
    }
  }
#endif
#if {{SPLITS}} == 0
  // Straight from registers, whatever the launch chose: a split's partial
  // as below, or, for a launch of one split, O and lse themselves (4-byte
  // stores a quad of lanes makes 16 contiguous bytes of: a decoding block's
  // few rows do not repay staging them in shared memory, and the registers
  // that staging keeps live across the loop are what a d192 or d256 block
  // has none of).
  const long long split_rows = ((long long)split * p.batch + batch) * p.heads;
  // Where the sequence's rows of O and lse are, read again rather than kept
  // across the loop (NVVM kept them on the stack: local memory).
  const Sequence out = sequence_of(p, batch);
  elem_t *o_seq = static_cast<elem_t *>(p.o) + out.o_off;
#pragma unroll
  for (int mt = 0; mt < kMTiles; mt++) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const float l = quad_sum(row_sum[mt][h]), inv_l = FAT_INV_L(l);
      const int r = warp_row0 + mt * 16 + g + h * 8;
      if (m0 + r >= rows) continue;
      const float lse = row_lse(l, row_max[mt][h], FAT_LSE_SCALE(mt, h));
      if (n_splits > 1) {
        const long long row = (split_rows + head_of(r)) * p.seqlen_q + row_pos[mt][h];
        float *oa = p.o_accum + row * kHeadDim;
#pragma unroll
        for (int dt = 0; dt < kDTiles; dt++)
          *reinterpret_cast<float2 *>(oa + dt * 8 + 2 * t) =
              make_float2(o[mt][dt][2 * h] * inv_l, o[mt][dt][2 * h + 1] * inv_l);
        if (t == 0) p.lse_accum[row] = lse;
      } else {
        elem_t *o_row = o_seq + (long long)row_pos[mt][h] * p.o_row_stride + head_of(r) * p.o_head_stride;
#pragma unroll
        for (int dt = 0; dt < kDTiles; dt++)
          if (dt * 8 < head_dim)  // the problem's columns only
            *reinterpret_cast<u32 *>(o_row + dt * 8 + 2 * t) =
                pack2_out(o[mt][dt][2 * h] * inv_l, o[mt][dt][2 * h + 1] * inv_l);
        if (t == 0)
          p.lse[((long long)batch * (p.cu_seqlens_q ? 0 : p.heads) + head_of(r)) * out.lse_rows +
                out.lse_row0 + row_pos[mt][h]] = lse;
      }
    }
  }
  return;
#endif
  if constexpr (kSplits > 1) {
    // A partial: o / l and its log-sum-exp in fp32, straight from registers
    // (the combine kernel reads it once). A split that saw no key of a row
    // leaves o = 0 and lse = -inf, which the combine weighs as nothing.
    const long long split_rows = ((long long)split * p.batch + batch) * p.heads;
#pragma unroll
    for (int mt = 0; mt < kMTiles; mt++) {
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const float l = quad_sum(row_sum[mt][h]), inv_l = FAT_INV_L(l);
        const int r = warp_row0 + mt * 16 + g + h * 8;
        if (m0 + r >= rows) continue;
        const long long row = (split_rows + head_of(r)) * p.seqlen_q + row_pos[mt][h];
        float *oa = p.o_accum + row * kHeadDim;
#pragma unroll
        for (int dt = 0; dt < kDTiles; dt++)
          *reinterpret_cast<float2 *>(oa + dt * 8 + 2 * t) =
              make_float2(o[mt][dt][2 * h] * inv_l, o[mt][dt][2 * h + 1] * inv_l);
        if (t == 0) p.lse_accum[row] = row_lse(l, row_max[mt][h], FAT_LSE_SCALE(mt, h));
      }
    }
    return;
  }

  // Epilogue: O = o / l through shared memory (Q's tile, free now), so that
  // global stores are 16 bytes wide; lse = m·scale + ln(l), -inf if l = 0.
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < kMTiles; mt++) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const float l = quad_sum(row_sum[mt][h]), inv_l = FAT_INV_L(l);
      const int r = warp_row0 + mt * 16 + g + h * 8;
#pragma unroll
      for (int dt = 0; dt < kDTiles; dt++)
        *reinterpret_cast<u32 *>(reinterpret_cast<unsigned char *>(q_smem) + tile_offset(r, dt * 8) + 4 * t) =
            pack2_out(o[mt][dt][2 * h] * inv_l, o[mt][dt][2 * h + 1] * inv_l);
      if (t == 0 && m0 + r < rows)
        p.lse[((long long)batch * (p.cu_seqlens_q ? 0 : p.heads) + head_of(r)) * seq.lse_rows +
              seq.lse_row0 + row_pos[mt][h]] = row_lse(l, row_max[mt][h], FAT_LSE_SCALE(mt, h));
    }
  }
  __syncthreads();
  elem_t *o_all = static_cast<elem_t *>(p.o) + seq.o_off;
  constexpr int kOutChunks = kBlockM * kChunksPerRow;
#pragma unroll
  for (int i = 0; i < (kOutChunks + kThreads - 1) / kThreads; i++) {
    const int c = tid + i * kThreads;
    if (kOutChunks % kThreads == 0 || c < kOutChunks) {
      const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      if (m0 + row < rows && col < head_dim)
        *reinterpret_cast<uint4 *>(o_all + (long long)position(row) * p.o_row_stride +
                                   head_of(row) * p.o_head_stride + col) =
            *reinterpret_cast<const uint4 *>(reinterpret_cast<unsigned char *>(q_smem) + tile_offset(row, col));
    }
  }
}
#undef FAT_SCALE_LOG2
#undef FAT_SOFTCAP_IN
#undef FAT_LSE_SCALE
#undef FAT_INV_L

#if {{SPLITS}} != 1
// Merges the kSplits partials of each query row (one warp per row, lane s
// holding split s's log-sum-exp): lse = log Σ exp(lse_s), O = Σ exp(lse_s -
// lse) · o_s, in fp32, rounded once. Grid: ceil(batch · heads · seqlen_q /
// rows per block) blocks of FAT_FWD_COMBINE_THREADS threads. SPLITS 0:
// kv.splits partials (launched only when it is above one), every lane's
// weight gathered, those past kv.splits zero.
enum : int { kMaxSplits = kSplits > 0 ? kSplits : FAT_FWD_MAX_LAUNCH_SPLITS };  // the lanes that may hold a split
extern "C" __global__ void __launch_bounds__(FAT_FWD_COMBINE_THREADS)
#if FAT_TAKES_KV
fat_fwd_mma80_combine(const fat_fwd_params p, const fat_fwd_kv_params kv) {
#else
fat_fwd_mma80_combine(const fat_fwd_params p) {
#endif
#if {{SPLITS}} == 0
  const int n_splits = kv.splits;
#else
  constexpr int n_splits = kSplits;
#endif
  constexpr int kRowsPerBlock = FAT_FWD_COMBINE_THREADS / 32;
  const int lane = threadIdx.x % 32;
  const long long row = (long long)blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  const long long n_rows = (long long)p.batch * p.heads * p.seqlen_q;
  if (row >= n_rows) return;
  const int pos = (int)(row % p.seqlen_q);
  const int head = (int)(row / p.seqlen_q % p.heads);
  const int batch = (int)(row / p.seqlen_q / p.heads);
  const Sequence seq = sequence_of(p, batch);
  if (pos >= seq.seqlen_q) return;
  const long long split_stride = n_rows;  // rows of one split's partials
  const float lse_s = lane < n_splits ? p.lse_accum[lane * split_stride + row] : neg_inf();
  float lse_max = lse_s;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) lse_max = fmaxf(lse_max, __shfl_xor_sync(0xffffffffu, lse_max, off));
  // Every split empty: the row saw no key (O = 0, lse = -inf).
  const float w = lse_max == neg_inf() ? 0.f : __expf(lse_s - lse_max);
  float sum = w;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const float weight = sum > 0.f ? w / sum : 0.f;  // this lane's split's share
  float weights[kMaxSplits];  // every split's, in every lane, before lanes part ways below
#pragma unroll
  for (int s = 0; s < kMaxSplits; s++) weights[s] = __shfl_sync(0xffffffffu, weight, s);
  if (lane == 0)
    p.lse[((long long)batch * (p.cu_seqlens_q ? 0 : p.heads) + head) * seq.lse_rows + seq.lse_row0 + pos] =
        sum > 0.f ? lse_max + logf(sum) : neg_inf();
  elem_t *o = static_cast<elem_t *>(p.o) + seq.o_off + (long long)pos * p.o_row_stride + head * p.o_head_stride;
#if {{SPLITS}} == 0
  // Four columns a lane (every lane at d128), and a chunk of splits' loads
  // issued together, each predicated on its weight, before their sums: the
  // loads of one split after another behind a branch (below, the fixed
  // counts' combine, kept for their tuned machine code) took one round
  // trip a split, 16 µs of a 190 µs decoding step at 29 splits
  // (notes/kernel-log.md p5).
  constexpr int kChunkSplits = 8;
  for (int col = lane * 4; col < p.head_dim; col += 32 * 4) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int s0 = 0; s0 < kMaxSplits; s0 += kChunkSplits) {
      if (s0 >= n_splits) break;
      float4 part[kChunkSplits];
#pragma unroll
      for (int i = 0; i < kChunkSplits; i++) {
        const float4 *src = reinterpret_cast<const float4 *>(p.o_accum + ((s0 + i) * split_stride + row) * kHeadDim + col);
        part[i] = weights[s0 + i] != 0.f ? *src : make_float4(0.f, 0.f, 0.f, 0.f);  // never an empty split's
      }
#pragma unroll
      for (int i = 0; i < kChunkSplits; i++) {
        const float ws = weights[s0 + i];
        acc.x += ws * part[i].x; acc.y += ws * part[i].y; acc.z += ws * part[i].z; acc.w += ws * part[i].w;
      }
    }
    *reinterpret_cast<uint2 *>(o + col) = make_uint2(pack2_out(acc.x, acc.y), pack2_out(acc.z, acc.w));
  }
#else
  for (int col = lane * 8; col < p.head_dim; col += 32 * 8) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s = 0; s < kMaxSplits; s++) {
      const float ws = weights[s];
      if (ws == 0.f) continue;  // also never reads an empty split's partial
      const float4 *src = reinterpret_cast<const float4 *>(p.o_accum + (s * split_stride + row) * kHeadDim + col);
      const float4 a = src[0], b = src[1];
      acc[0] += ws * a.x; acc[1] += ws * a.y; acc[2] += ws * a.z; acc[3] += ws * a.w;
      acc[4] += ws * b.x; acc[5] += ws * b.y; acc[6] += ws * b.z; acc[7] += ws * b.w;
    }
    uint4 out;
    out.x = pack2_out(acc[0], acc[1]);
    out.y = pack2_out(acc[2], acc[3]);
    out.z = pack2_out(acc[4], acc[5]);
    out.w = pack2_out(acc[6], acc[7]);
    *reinterpret_cast<uint4 *>(o + col) = out;
  }
#endif
}
#endif
