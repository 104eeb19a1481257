// CASE: type: func.return with two values from a function with one result
// EXPECT: has 2 operands, but enclosing function (@f) returns 1
func.func @f(%a: f32) -> f32 {
  return %a, %a : f32, f32
}
