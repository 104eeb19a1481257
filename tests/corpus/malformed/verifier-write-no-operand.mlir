// CASE: verifier: latch.write with no value to write
"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "param"} : () -> ()
"latch.update"() ({
^bb0(%l: tensor<f32>):
  "latch.write"() {state = @w} : () -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
