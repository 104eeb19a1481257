// CASE: truncated: the file ends inside the attribute dictionary of a latch.state
// EXPECT: error
"latch.state"() {sym_name = "w", ty