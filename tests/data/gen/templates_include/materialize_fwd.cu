// Stand-in for templates/materialize_fwd.cu: the real generator/space.lua
// also expands the materialising baseline family, and this fixture folder
// replaces every template. test_engine_include looks only at mma80 variants.
constexpr int kTile = {{TILE}};
