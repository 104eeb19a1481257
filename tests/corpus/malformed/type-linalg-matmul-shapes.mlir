// CASE: type: linalg.matmul whose contraction dimensions disagree (2x3 times 4x5)
// EXPECT: linalg.matmul
func.func @f(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>, %c: tensor<2x5xf32>) -> tensor<2x5xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<2x3xf32>, tensor<4x5xf32>) outs(%c : tensor<2x5xf32>) -> tensor<2x5xf32>
  return %r : tensor<2x5xf32>
}
