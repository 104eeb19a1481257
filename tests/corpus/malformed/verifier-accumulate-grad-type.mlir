// CASE: verifier: latch.accumulate of a grad whose type differs from the accumulator
"latch.update"() ({
^bb0(%a: tensor<4xf32>, %g: tensor<8xf32>, %l: tensor<f32>):
  %n = "latch.accumulate"(%a, %g) : (tensor<4xf32>, tensor<8xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
