// CASE: verifier: latch.adamw whose beta1 is an i64 attribute
"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<i64>):
  %r:3 = "latch.adamw"(%p, %p, %p, %p, %lr, %t) {beta1 = 1 : i64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
