// CASE: truncated: the file ends inside a block's argument list
// EXPECT: error
"latch.update"() ({
^bb0(%l: tensor<f