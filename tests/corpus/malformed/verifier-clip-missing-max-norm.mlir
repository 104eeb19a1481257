// CASE: verifier: latch.clip_global_norm without its max_norm attribute
"latch.update"() ({
^bb0(%g: tensor<4xf32>, %l: tensor<f32>):
  %c:2 = "latch.clip_global_norm"(%g) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
