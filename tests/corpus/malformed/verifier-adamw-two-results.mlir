// CASE: verifier: latch.adamw with two results instead of three
"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<i64>):
  %r:2 = "latch.adamw"(%p, %p, %p, %p, %lr, %t) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>)
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
