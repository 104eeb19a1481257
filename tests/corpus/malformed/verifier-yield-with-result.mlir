// CASE: verifier: latch.yield that defines a result
"latch.update"() ({
^bb0(%w: tensor<4xf32>, %l: tensor<f32>):
  %r = "latch.loop"(%w) ({
  ^bb0(%i: tensor<i64>, %c: tensor<4xf32>):
    %y = "latch.yield"(%c) : (tensor<4xf32>) -> tensor<4xf32>
  }) {times = 2 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
