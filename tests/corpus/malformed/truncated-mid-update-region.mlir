// CASE: truncated: the file ends inside the region of a latch.update
// EXPECT: error
"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "param"} : () -> ()
"latch.update"() ({
^bb0(%x: tensor<4xf32>, %l: tensor<f32>):
  "latch.write"(%x) {state = @w} : (tensor<4xf32>) -> ()
