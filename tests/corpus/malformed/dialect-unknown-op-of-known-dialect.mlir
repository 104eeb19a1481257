// CASE: unknown-dialect: an op arith does not define
// EXPECT: custom op 'arith.frobnicate' is unknown
func.func @f() {
  %x = arith.frobnicate : i32
  return
}
