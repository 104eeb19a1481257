// CASE: verifier: latch.warmup_cosine whose step counter is tensor<f32>
"latch.update"() ({
^bb0(%s: tensor<f32>, %l: tensor<f32>):
  %lr = "latch.warmup_cosine"(%s) {peak = 1.0 : f64, warmup_steps = 1 : i64, total_steps = 10 : i64, final_ratio = 0.1 : f64} : (tensor<f32>) -> tensor<f32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
