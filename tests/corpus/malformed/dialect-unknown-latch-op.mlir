// CASE: unknown-dialect: a latch.* op the dialect does not define
// EXPECT: 'latch.sgdw' op is not an op of the latch dialect
"latch.update"() ({
^bb0(%p: tensor<4xf32>, %l: tensor<f32>):
  %n = "latch.sgdw"(%p) : (tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
