// CASE: type: tensor.extract from a 2-d tensor with one index
// EXPECT: error
func.func @f(%t: tensor<4x4xf32>, %i: index) -> f32 {
  %e = tensor.extract %t[%i] : tensor<4x4xf32>
  return %e : f32
}
