// CASE: verifier: latch.attention with a zero scale
func.func @f(%q: tensor<1x2x64x16xbf16>) {
  %o, %l = "latch.attention"(%q, %q, %q) {causal = true, scale = 0.0 : f64} : (tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>) -> (tensor<1x2x64x16xbf16>, tensor<1x2x64xf32>)
  return
}
