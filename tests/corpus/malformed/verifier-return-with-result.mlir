// CASE: verifier: latch.return that defines a result
"latch.update"() ({
^bb0(%l: tensor<f32>):
  %r = "latch.return"(%l) : (tensor<f32>) -> tensor<f32>
}) {sym_name = "u"} : () -> ()
