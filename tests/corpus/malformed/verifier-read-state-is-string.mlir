// CASE: verifier: latch.read whose state attribute is a string, not a symbol reference
"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "param"} : () -> ()
"latch.update"() ({
^bb0(%l: tensor<f32>):
  %w = "latch.read"() {state = "w"} : () -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
