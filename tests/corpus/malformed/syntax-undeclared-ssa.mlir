// CASE: syntax: use of an SSA value that is never defined
// EXPECT: use of undeclared SSA value name
func.func @f(%a: f32) -> f32 {
  %b = arith.addf %a, %nope : f32
  return %b : f32
}
