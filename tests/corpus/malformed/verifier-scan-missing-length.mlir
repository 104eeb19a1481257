// CASE: verifier: latch.scan without its length attribute
"latch.update"() ({
^bb0(%x: tensor<3x4xf32>, %l: tensor<f32>):
  %r = "latch.scan"(%x) ({
  ^bb0(%xi: tensor<4xf32>):
    "latch.yield"(%xi) : (tensor<4xf32>) -> ()
  }) {num_carries = 0 : i64} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
