// CASE: syntax: a dense literal whose brackets do not balance
// EXPECT: error
func.func @f() -> tensor<2xf32> {
  %c = arith.constant dense<[1.0, 2.0> : tensor<2xf32>
  return %c : tensor<2xf32>
}
