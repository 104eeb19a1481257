// CASE: truncated: the file ends inside a tensor type
// EXPECT: error
func.func private @f(tensor<4x