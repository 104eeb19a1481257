// CASE: verifier: latch.clip_global_norm with a negative max_norm
"latch.update"() ({
^bb0(%g: tensor<4xf32>, %l: tensor<f32>):
  %c:2 = "latch.clip_global_norm"(%g) {max_norm = -1.0 : f64} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
