// CASE: verifier: latch.all_reduce without its bucket attribute
"latch.update"() ({
^bb0(%g: tensor<4xf32>, %l: tensor<f32>):
  %r = "latch.all_reduce"(%g) {reduction = "mean"} : (tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
