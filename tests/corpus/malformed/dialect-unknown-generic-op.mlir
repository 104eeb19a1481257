// CASE: unknown-dialect: a generic op of a dialect that does not exist
// EXPECT: 'foo.bar' op is not a registered operation
func.func @f() {
  "foo.bar"() : () -> ()
  return
}
