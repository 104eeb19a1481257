// CASE: syntax: a tensor type with a dangling 'x' and no element type
// EXPECT: error
func.func private @f(tensor<4x>) -> ()
