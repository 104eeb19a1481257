// CASE: verifier: latch.sgd whose new_param type differs from the param type
"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>):
  %n = "latch.sgd"(%p, %p, %lr) {momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xbf16>
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
