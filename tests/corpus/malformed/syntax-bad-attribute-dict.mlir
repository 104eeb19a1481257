// CASE: syntax: an attribute dictionary entry without '=' and a value
// EXPECT: error
"latch.state"() {sym_name "w", type = tensor<4xf32>, kind = "param"} : () -> ()
