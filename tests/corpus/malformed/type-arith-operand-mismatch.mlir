// CASE: type: arith.addf on tensors of different shapes
// EXPECT: expects different type than prior uses
func.func @f(%a: tensor<4xf32>, %b: tensor<8xf32>) -> tensor<4xf32> {
  %c = arith.addf %a, %b : tensor<4xf32>
  return %c : tensor<4xf32>
}
