// CASE: verifier: latch.call whose callee is a string, not a symbol reference
"latch.update"() ({
^bb0(%x: tensor<4xf32>, %l: tensor<f32>):
  %r = "latch.call"(%x) {callee = "f"} : (tensor<4xf32>) -> tensor<f32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
func.func private @f(tensor<4xf32>) -> tensor<f32>
