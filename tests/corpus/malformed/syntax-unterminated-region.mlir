// CASE: syntax: a function body whose closing brace is missing
// EXPECT: error
func.func @f(%a: f32) -> f32 {
  %b = arith.addf %a, %a : f32
  return %b : f32
