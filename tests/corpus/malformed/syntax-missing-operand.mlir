// CASE: syntax: binary op with its second operand missing
// EXPECT: expected SSA operand
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %b = arith.addf %a, : tensor<4xf32>
  return %b : tensor<4xf32>
}
