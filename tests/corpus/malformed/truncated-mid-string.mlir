// CASE: truncated: the file ends inside a string literal
// EXPECT: error
"latch.state"() {sym_name = "w