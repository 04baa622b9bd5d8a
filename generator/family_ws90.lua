-- The "ws90" family: the warp-specialised forward on Hopper (templates/
-- fwd_ws90.cu), sm_90a only. A producer warp loads Q, K and V with the
-- tensor copy engine through rings of mbarriers; one to three consumer
-- warpgroups compute on wgmma, their registers traded for the producer's
-- (setmaxnreg). Head dims in whole slabs of 64 columns (d96 then on the
-- 128-column template) or, SLAB 32, of 32 (d96 on a template of its own
-- width); dense and variable-length batches, GQA, windows and
-- the soft-cap; no decoding schedules. The runtime launches it with three
-- tensor maps (tuner/fwd_launch.c) and serves a call whose tensors they
-- cannot describe with another family.
--
-- e4m3 (fp8 inputs, O in bf16) runs on the same template: S's products
-- take 32 one-byte columns a k-step, a slab is 128 bytes (128 columns; 64
-- for d64 and d192), and P·V reads V transposed -- wgmma's fp8 operands
-- are K-major only -- from a second ring the producer warpgroup's other
-- warps fill from the staged tiles (templates/fwd_ws90.cu). This family
-- alone serves e4m3, so it names the built-in default for it.

local constraints = fat.require("constraints")
local tiles = fat.require("wgmma_tiles")

-- What a block may hold (the resource model the constraints below apply):
-- Registers a consumer thread has (the template's kConsumerRegs): with two
-- or three consumers, what setmaxnreg gives them (FlashAttention-3's
-- split of the 65,536 of an SM); a lone consumer keeps the launch's 255.
local CONSUMER_REGISTERS = {[1] = 255, [2] = 240, [3] = 160}
-- e4m3's: the producer warpgroup keeps 40 for transposing V (the
-- template's kProducerRegs), so two consumers have 232 and three 152.
local CONSUMER_REGISTERS_FP8 = {[1] = 255, [2] = 232, [3] = 152}
-- Registers a consumer thread needs beyond its accumulators (row
-- statistics, addresses, loop state, the softmax's temporaries); from
-- ptxas's reports of the first builds.
local REGISTER_OVERHEAD = 32
-- Static shared memory of the template: 2 + 4·STAGES mbarriers of 8 bytes
-- (and one more word with PERSISTENT 2).
local BARRIER_BYTES = 8

-- Key tiles per template head dim: FlashAttention-3's choice for it and
-- the neighbours worth timing against it (smaller for causal blocks, the
-- largest that fits). BLOCK_N outside a head dim's list is not generated.
local BLOCK_N = {
  [64] = {128, 160, 192},
  [96] = {96, 128, 144, 176},  -- FlashAttention-3's 144 and its neighbours
  [128] = {112, 128, 176},
  [192] = {96, 112},
  [256] = {64, 80},
}
-- e4m3's, in multiples of 32 (P·V's k-step, a slab of transposed V):
-- FlashAttention-3's fp8 tiles (d64 160, d128 224, d192 160, d256 128)
-- and their neighbours. One byte an element halves every tile, so each is
-- wider than its 16-bit head dim's.
local BLOCK_N_FP8 = {
  [64] = {128, 160, 192},
  [128] = {128, 160, 192, 224},
  [192] = {96, 128, 160},
  [256] = {96, 128},
}
-- Bytes an input element (e4m3: 1).
local function element_bytes(c)
  return c.DTYPE == "e4m3" and 1 or tiles.ELEMENT_BYTES
end

local family = {
  name = "ws90",
  direction = "fwd",
  template = "fwd_ws90.cu",
  entry = "fat_fwd_ws90",
  archs = {"sm_90a"},
  head_dims = {64, 96, 128, 192, 256},
  dtypes = {"fp16", "bf16", "e4m3"},
  masks = {"none", "causal", "local"},
  params = {
    -- Query rows per block, 64 per consumer warpgroup. The template takes
    -- one to three. Three (192 rows, FlashAttention-3's d64 tile) have 160
    -- registers a thread: with P from registers only d64 at BLOCK_N 128
    -- fits them (the register rule below prunes the rest); one has no
    -- pingpong and leaves most of the SM's registers unused.
    {name = "BLOCK_M", values = {128, 192}},
    {name = "BLOCK_N", values = {64, 80, 96, 112, 128, 144, 160, 176, 192, 224}},  -- keys per K/V tile
    {name = "STAGES", values = {2}},                 -- K and V buffers of each ring
    -- Softmax of tile j beside P·V of tile j - 1: 1 as written (ptxas
    -- moves the wait for P·V above the softmax), 2 with the wait held
    -- behind it in the machine code too (templates/fwd_ws90.cu).
    {name = "OVERLAP", values = {0, 1, 2}},
    {name = "PINGPONG", values = {0, 1}},            -- consumers take turns to issue their products
    -- One block an SM looping over query blocks: 1 every gridDim.x-th, 2
    -- the next a counter hands out (blocks of unequal work: masks).
    {name = "PERSISTENT", values = {0, 1, 2}},
    -- Columns of a swizzled slab: 64 (128-byte rows, whole 64-column slabs
    -- of the head dim) or 32 (64-byte rows), which only d96 needs: its
    -- template is then 96 columns wide, not 128. e4m3's slabs are 128
    -- columns (128-byte rows) where the template's width is a multiple of
    -- 128, else 64 (64-byte rows): one value a head dim, not a choice.
    {name = "SLAB", values = {64, 32, 128}},
  },
  fixed = {PACK_GQA = 0, SPLITS = 1},
}

-- m128n176s2opr: BLOCK_M, BLOCK_N, STAGES, then o for OVERLAP 1 (O for 2),
-- p for PINGPONG, r for PERSISTENT 1 (resident blocks), d for 2 (drawn
-- from a counter), h for SLAB 32 (half slabs), w for SLAB 128 (e4m3's wide
-- slabs).
function family.tag(c)
  return ("m%dn%ds%d%s%s%s%s"):format(c.BLOCK_M, c.BLOCK_N, c.STAGES, ({[1] = "o", [2] = "O"})[c.OVERLAP] or "",
                                     c.PINGPONG == 1 and "p" or "", ({[1] = "r", [2] = "d"})[c.PERSISTENT] or "",
                                     ({[32] = "h", [128] = "w"})[c.SLAB] or "")
end

-- The template's head dim for head dim D in configuration C: D in whole
-- slabs (the columns past D load as zeros and are never stored).
function family.template_head_dim(d, c)
  if c and c.SLAB == 32 then return (d + 31) // 32 * 32 end
  return tiles.template_head_dim(d)
end

-- No fixed choice of its own for the 16-bit dtypes (mma80's default is
-- their baseline). e4m3 has no other family: FlashAttention-3's fp8 tile
-- where this space has it (d64's 192-row blocks pruned, 128), the
-- pingpong, softmax beside P·V, no persistence.
function family.default(d, dtype)
  if dtype ~= "e4m3" then return {} end
  local t = tiles.template_head_dim(d)
  return {BLOCK_M = 128, BLOCK_N = ({[64] = 128, [128] = 128, [192] = 128, [256] = 96})[t], STAGES = 2,
          OVERLAP = 1, PINGPONG = 1, PERSISTENT = 0, SLAB = t % 128 == 0 and 128 or 64}
end

local function consumers(c)
  return c.BLOCK_M // tiles.ROWS_PER_WARPGROUP
end

-- Q, STAGES K and V tiles (swizzled, unpadded), the alignment slack and
-- the barriers; e4m3 also STAGES tiles of V transposed, their barriers
-- and a word a stage (the keys a staged V tile holds).
function family.smem_bytes(c)
  local fp8 = c.DTYPE == "e4m3"
  local tiles_kv = (fp8 and 3 or 2) * c.STAGES * c.BLOCK_N
  return (c.BLOCK_M + tiles_kv) * family.template_head_dim(c.HEAD_DIM, c) * element_bytes(c) +
         tiles.ALIGNMENT_SLACK + (2 + (fp8 and 6 or 4) * c.STAGES + (c.PERSISTENT == 2 and 1 or 0)) * BARRIER_BYTES +
         (fp8 and 4 * c.STAGES or 0)
end

function family.resources(c)
  return {threads = tiles.THREADS_PER_WARPGROUP * (consumers(c) + 1), block_m = c.BLOCK_M,
          smem_bytes = family.smem_bytes(c)}
end

-- A consumer thread's accumulators: S (BLOCK_N / 2 fp32), O (head dim / 2
-- fp32) and P rounded for P·V (BLOCK_N / 4 registers of two elements; of
-- four, e4m3).
function family.accumulator_registers(c)
  return c.BLOCK_N // 2 + family.template_head_dim(c.HEAD_DIM, c) // 2 + c.BLOCK_N // (4 * (2 // element_bytes(c)))
end

family.constraints = {
  -- e4m3's slab is its head dim's (128 bytes where the template is whole
  -- 128-byte rows, else 64); the 16-bit dtypes' never 128 columns (256
  -- bytes: no swizzle is that wide).
  function(c)
    if c.DTYPE == "e4m3" then
      local want = tiles.template_head_dim(c.HEAD_DIM) % 128 == 0 and 128 or 64
      if c.SLAB ~= want then return ("SLAB %d: e4m3 head dim %d takes slabs of %d"):format(c.SLAB, c.HEAD_DIM, want) end
    elseif c.SLAB == 128 then
      return "SLAB 128: one-byte elements only (e4m3)"
    end
  end,
  -- Half slabs only where they make the template narrower (d96: 96
  -- columns, not 128); elsewhere the same width in more, smaller copies.
  function(c)
    if c.SLAB == 32 and family.template_head_dim(c.HEAD_DIM, c) == tiles.template_head_dim(c.HEAD_DIM) then
      return ("SLAB 32: head dim %d is whole 64-column slabs already"):format(c.HEAD_DIM)
    end
  end,
  function(c)
    local d = family.template_head_dim(c.HEAD_DIM, c)
    local list = (c.DTYPE == "e4m3" and BLOCK_N_FP8 or BLOCK_N)[d] or {}  -- none: a width no slab gives
    for _, n in ipairs(list) do if n == c.BLOCK_N then return nil end end
    return ("BLOCK_N %d is not among head dim %d's key tiles (%s)"):format(c.BLOCK_N, d, table.concat(list, ", "))
  end,
  constraints.fits_shared_memory(family),
  function(c)
    local have = (c.DTYPE == "e4m3" and CONSUMER_REGISTERS_FP8 or CONSUMER_REGISTERS)[consumers(c)]
    local need = family.accumulator_registers(c) + REGISTER_OVERHEAD
    if need > have then
      return ("registers: %d accumulators + %d > the %d a consumer thread has"):format(
        family.accumulator_registers(c), REGISTER_OVERHEAD, have)
    end
  end,
  function(c)
    if c.PINGPONG == 1 and consumers(c) < 2 then return "PINGPONG needs two consumer warpgroups: BLOCK_M 128" end
  end,
  -- A resident block takes every n-th query block in a fixed order: even
  -- only where every query block has the same work. Causal and windowed
  -- blocks differ: theirs come from a counter (FlashAttention-3's way),
  -- which costs a workspace and a memset a launch, and buys nothing where
  -- the work is equal.
  function(c)
    if c.PERSISTENT == 1 and c.MASK ~= "none" then return "PERSISTENT 1: only without a mask (equal work per block)" end
    if c.PERSISTENT == 2 and c.MASK == "none" then return "PERSISTENT 2: only with a mask (PERSISTENT 1 is even without)" end
  end,
}

return family
