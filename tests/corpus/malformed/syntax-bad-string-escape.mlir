// CASE: syntax: an unknown escape sequence in a string literal
// EXPECT: unknown escape in string literal
func.func @f() attributes {note = "bad \q escape"} {
  return
}
