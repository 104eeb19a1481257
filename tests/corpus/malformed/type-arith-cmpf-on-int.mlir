// CASE: type: arith.cmpf comparing integers
// EXPECT: error
func.func @f(%a: i32) -> i1 {
  %c = arith.cmpf olt, %a, %a : i32
  return %c : i1
}
