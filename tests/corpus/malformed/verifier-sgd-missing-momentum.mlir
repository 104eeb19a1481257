// CASE: verifier: latch.sgd without its momentum attribute
"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>):
  %n = "latch.sgd"(%p, %p, %lr) {weight_decay = 0.0 : f64, nesterov = false} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
