// CASE: verifier: latch.state declared with a result value
%w = "latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "param"} : () -> tensor<4xf32>
