// CASE: syntax: a character that starts no MLIR token
// EXPECT: unexpected character
func.func @f() {
  $oops
  return
}
