// CASE: syntax: an attribute whose value is missing after its type colon
// EXPECT: error
func.func @f() attributes {a = 1 : } {
  return
}
