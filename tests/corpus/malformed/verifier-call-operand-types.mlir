// CASE: verifier: latch.call passing a tensor<8xf32> to a function taking tensor<4xf32>
"latch.update"() ({
^bb0(%x: tensor<8xf32>, %l: tensor<f32>):
  %r = "latch.call"(%x) {callee = @f} : (tensor<8xf32>) -> tensor<f32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
func.func private @f(tensor<4xf32>) -> tensor<f32>
