// CASE: verifier: latch.yield used inside a func.func
func.func @f(%x: tensor<4xf32>) {
  "latch.yield"(%x) : (tensor<4xf32>) -> ()
  return
}
