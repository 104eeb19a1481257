// CASE: type: linalg.generic body yielding f64 into an f32 output
// EXPECT: error
#id = affine_map<(d0) -> (d0)>
func.func @f(%a: tensor<4xf32>, %o: tensor<4xf32>, %k: f64) -> tensor<4xf32> {
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<4xf32>) outs(%o : tensor<4xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %k : f64
  } -> tensor<4xf32>
  return %r : tensor<4xf32>
}
