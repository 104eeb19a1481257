// CASE: verifier: latch.read that defines no result
"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "param"} : () -> ()
"latch.update"() ({
^bb0(%l: tensor<f32>):
  "latch.read"() {state = @w} : () -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
