// CASE: verifier: latch.write without its state attribute
"latch.update"() ({
^bb0(%x: tensor<4xf32>, %l: tensor<f32>):
  "latch.write"(%x) : (tensor<4xf32>) -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
