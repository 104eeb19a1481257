// CASE: truncated: the file ends inside a dense literal
// EXPECT: error
func.func @f() -> tensor<2xf32> {
  %c = arith.constant dense<[1.0, 2.