// CASE: type: two results bound to an op that defines one
// EXPECT: operation defines 1 results but was provided 2 to bind
func.func @f() {
  %a, %b = arith.constant 1 : i32
  return
}
