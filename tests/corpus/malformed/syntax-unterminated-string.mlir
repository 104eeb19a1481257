// CASE: syntax: a string attribute whose closing quote is missing
// EXPECT: expected '"' in string literal
func.func @f() attributes {note = "never closed} {
  return
}
