// CASE: syntax: a '}' at module level with nothing open
// EXPECT: error
func.func @f() {
  return
}
}
