// CASE: verifier: latch.return whose second output is an i32 scalar, not a tensor
"latch.update"() ({
^bb0(%l: tensor<f32>):
  %c = arith.constant 1 : i32
  "latch.return"(%l, %c) : (tensor<f32>, i32) -> ()
}) {sym_name = "u"} : () -> ()
