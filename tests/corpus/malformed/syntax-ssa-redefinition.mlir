// CASE: syntax: the same SSA name defined twice
// EXPECT: redefinition of SSA value
func.func @f(%a: f32) -> f32 {
  %b = arith.addf %a, %a : f32
  %b = arith.mulf %a, %a : f32
  return %b : f32
}
