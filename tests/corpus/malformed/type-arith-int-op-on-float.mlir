// CASE: type: arith.addi applied to f32 values
// EXPECT: must be signless-integer-like
func.func @f(%a: f32) -> f32 {
  %b = arith.addi %a, %a : f32
  return %b : f32
}
