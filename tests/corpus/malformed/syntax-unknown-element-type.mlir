// CASE: syntax: a tensor of an element type that does not exist (f33)
// EXPECT: error
func.func private @f(tensor<4xf33>) -> ()
