// CASE: verifier: latch.every without its counter operand
"latch.update"() ({
^bb0(%l: tensor<f32>):
  "latch.every"() ({
    "latch.yield"() : () -> ()
  }) {period = 2 : i64} : () -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
