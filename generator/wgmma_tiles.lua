-- What the two wgmma families (family_wgmma90.lua, family_bwd_wgmma90.lua)
-- share about their tiles: rows of 64 a warpgroup, 64-column slabs of
-- 128-byte rows in wgmma's swizzle (templates/wgmma.cuh), every tile
-- 1024-byte aligned.
local wgmma_tiles = {
  ROWS_PER_WARPGROUP = 64,    -- wgmma's M
  THREADS_PER_WARPGROUP = 128,
  ELEMENT_BYTES = 2,          -- fp16 and bf16
  ALIGNMENT_SLACK = 1024,     -- the templates round their tiles up to 1024 bytes
  SLAB = 64,                  -- columns of one 128-byte swizzled slab
}

-- The template's HEAD_DIM for head dim D: whole slabs (the columns past D
-- load as zeros and are never stored).
function wgmma_tiles.template_head_dim(d)
  return (d + wgmma_tiles.SLAB - 1) // wgmma_tiles.SLAB * wgmma_tiles.SLAB
end

return wgmma_tiles
