// CASE: syntax: a result group '%r:0' of size zero
// EXPECT: error
func.func @f(%a: f32) {
  %r:0 = arith.negf %a : f32
  return
}
