// CASE: verifier: latch.update nested inside a func.func instead of the module
func.func @f() {
  "latch.update"() ({
  ^bb0(%l: tensor<f32>):
    "latch.return"(%l) : (tensor<f32>) -> ()
  }) {sym_name = "u"} : () -> ()
  return
}
