// CASE: type: linalg.generic with one indexing map for two operands
// EXPECT: linalg.generic
#id = affine_map<(d0) -> (d0)>
func.func @f(%a: tensor<4xf32>, %o: tensor<4xf32>) -> tensor<4xf32> {
  %r = linalg.generic {indexing_maps = [#id], iterator_types = ["parallel"]}
      ins(%a : tensor<4xf32>) outs(%o : tensor<4xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  } -> tensor<4xf32>
  return %r : tensor<4xf32>
}
