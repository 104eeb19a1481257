// CASE: syntax: an undefined value in the second chunk of --split-input-file (line numbers of the whole file)
// ARGS: --split-input-file
// EXPECT: use of undeclared SSA value name
func.func @f() {
  return
}

// -----

func.func @g() -> f32 {
  return %nope : f32
}
