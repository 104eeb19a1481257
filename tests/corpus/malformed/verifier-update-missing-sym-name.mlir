// CASE: verifier: latch.update without its sym_name attribute
"latch.update"() ({
^bb0(%l: tensor<f32>):
  "latch.return"(%l) : (tensor<f32>) -> ()
}) : () -> ()
