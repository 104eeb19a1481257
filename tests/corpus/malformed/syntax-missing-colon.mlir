// CASE: syntax: the ':' before the type of a custom op is missing
// EXPECT: expected ':'
func.func @f(%a: f32) -> f32 {
  %b = arith.mulf %a, %a f32
  return %b : f32
}
