// CASE: syntax: an SSA name without an identifier after '%'
// EXPECT: error
func.func @f(%a: f32) -> f32 {
  % = arith.negf %a : f32
  return %a : f32
}
