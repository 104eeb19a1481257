// CASE: verifier: latch.every without its period attribute
"latch.update"() ({
^bb0(%s: tensor<i64>, %l: tensor<f32>):
  "latch.every"(%s) ({
    "latch.yield"() : () -> ()
  }) : (tensor<i64>) -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
