// CASE: verifier: latch.adamw whose lr is tensor<1xf32> instead of tensor<f32>
"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<1xf32>, %t: tensor<i64>, %l: tensor<f32>):
  %r:3 = "latch.adamw"(%p, %p, %p, %p, %lr, %t) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<1xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
