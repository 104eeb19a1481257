// CASE: unknown-dialect: a custom-syntax op of a dialect that does not exist
// EXPECT: Dialect `foo' not found for custom op 'foo.bar'
func.func @f() {
  foo.bar
  return
}
