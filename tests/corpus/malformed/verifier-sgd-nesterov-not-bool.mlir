// CASE: verifier: latch.sgd whose nesterov flag is an i64, not an i1
"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>):
  %n = "latch.sgd"(%p, %p, %lr) {momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = 1 : i64} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
