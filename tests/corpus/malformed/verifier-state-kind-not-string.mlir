// CASE: verifier: latch.state whose kind is an integer, not a string
"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = 7 : i64} : () -> ()
