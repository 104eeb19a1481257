// CASE: verifier: latch.attention_grad whose lse does not have q's rows
func.func @f(%q: tensor<1x2x64x16xbf16>, %l: tensor<1x2x32xf32>, %d: tensor<1x2x64xf32>) {
  %a, %b, %c = "latch.attention_grad"(%q, %q, %q, %l, %q, %d) {causal = true, scale = 0.25 : f64} : (tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1x2x32xf32>, tensor<1x2x64x16xbf16>, tensor<1x2x64xf32>) -> (tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>)
  return
}
