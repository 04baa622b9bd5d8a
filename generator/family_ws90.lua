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

local constraints = fat.require("constraints")
local tiles = fat.require("wgmma_tiles")

-- What a block may hold (the resource model the constraints below apply):
-- Registers a consumer thread has (the template's kConsumerRegs): with two
-- or three consumers, what setmaxnreg gives them (FlashAttention-3's
-- split of the 65,536 of an SM); a lone consumer keeps the launch's 255.
local CONSUMER_REGISTERS = {[1] = 255, [2] = 240, [3] = 160}
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

local family = {
  name = "ws90",
  direction = "fwd",
  template = "fwd_ws90.cu",
  entry = "fat_fwd_ws90",
  archs = {"sm_90a"},
  head_dims = {64, 96, 128, 192, 256},
  dtypes = {"fp16", "bf16"},
  masks = {"none", "causal", "local"},
  params = {
    -- Query rows per block, 64 per consumer warpgroup. The template takes
    -- one to three. Three (192 rows, FlashAttention-3's d64 tile) have 160
    -- registers a thread: with P from registers only d64 at BLOCK_N 128
    -- fits them (the register rule below prunes the rest); one has no
    -- pingpong and leaves most of the SM's registers unused.
    {name = "BLOCK_M", values = {128, 192}},
    {name = "BLOCK_N", values = {64, 80, 96, 112, 128, 144, 160, 176, 192}},  -- keys per K/V tile
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
    -- template is then 96 columns wide, not 128.
    {name = "SLAB", values = {64, 32}},
  },
  fixed = {PACK_GQA = 0, SPLITS = 1},
}

-- m128n176s2opr: BLOCK_M, BLOCK_N, STAGES, then o for OVERLAP 1 (O for 2),
-- p for PINGPONG, r for PERSISTENT 1 (resident blocks), d for 2 (drawn
-- from a counter), h for SLAB 32 (half slabs).
function family.tag(c)
  return ("m%dn%ds%d%s%s%s%s"):format(c.BLOCK_M, c.BLOCK_N, c.STAGES, ({[1] = "o", [2] = "O"})[c.OVERLAP] or "",
                                     c.PINGPONG == 1 and "p" or "", ({[1] = "r", [2] = "d"})[c.PERSISTENT] or "",
                                     c.SLAB == 32 and "h" or "")
end

-- The template's head dim for head dim D in configuration C: D in whole
-- slabs (the columns past D load as zeros and are never stored).
function family.template_head_dim(d, c)
  if c and c.SLAB == 32 then return (d + 31) // 32 * 32 end
  return tiles.template_head_dim(d)
end

-- No fixed choice of its own (mma80's default is every problem's baseline).
function family.default()
  return {}
end

local function consumers(c)
  return c.BLOCK_M // tiles.ROWS_PER_WARPGROUP
end

-- Q, STAGES K and V tiles (swizzled, unpadded), the alignment slack and
-- the barriers.
function family.smem_bytes(c)
  return (c.BLOCK_M + 2 * c.STAGES * c.BLOCK_N) * family.template_head_dim(c.HEAD_DIM, c) * tiles.ELEMENT_BYTES +
         tiles.ALIGNMENT_SLACK + (2 + 4 * c.STAGES + (c.PERSISTENT == 2 and 1 or 0)) * BARRIER_BYTES
end

function family.resources(c)
  return {threads = tiles.THREADS_PER_WARPGROUP * (consumers(c) + 1), block_m = c.BLOCK_M,
          smem_bytes = family.smem_bytes(c)}
end

-- A consumer thread's accumulators: S (BLOCK_N / 2 fp32), O (head dim / 2
-- fp32) and P rounded for P·V (BLOCK_N / 4 registers of two elements).
function family.accumulator_registers(c)
  return c.BLOCK_N // 2 + family.template_head_dim(c.HEAD_DIM, c) // 2 + c.BLOCK_N // 4
end

family.constraints = {
  -- Half slabs only where they make the template narrower (d96: 96
  -- columns, not 128); elsewhere the same width in more, smaller copies.
  function(c)
    if c.SLAB == 32 and family.template_head_dim(c.HEAD_DIM, c) == tiles.template_head_dim(c.HEAD_DIM) then
      return ("SLAB 32: head dim %d is whole 64-column slabs already"):format(c.HEAD_DIM)
    end
  end,
  function(c)
    local d = family.template_head_dim(c.HEAD_DIM, c)
    local list = BLOCK_N[d]
    for _, n in ipairs(list) do if n == c.BLOCK_N then return nil end end
    return ("BLOCK_N %d is not among head dim %d's key tiles (%s)"):format(c.BLOCK_N, d, table.concat(list, ", "))
  end,
  constraints.fits_shared_memory(family),
  function(c)
    local have = CONSUMER_REGISTERS[consumers(c)]
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
