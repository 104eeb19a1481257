// CASE: verifier: latch.warmup_cosine with final_ratio below 0
"latch.update"() ({
^bb0(%s: tensor<i64>, %l: tensor<f32>):
  %lr = "latch.warmup_cosine"(%s) {peak = 1.0 : f64, warmup_steps = 1 : i64, total_steps = 10 : i64, final_ratio = -0.5 : f64} : (tensor<i64>) -> tensor<f32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
