// CASE: type: func.call passing an i32 to a function taking f32
// EXPECT: operand type mismatch
func.func private @g(f32) -> f32
func.func @f(%a: i32) -> f32 {
  %r = func.call @g(%a) : (i32) -> f32
  return %r : f32
}
