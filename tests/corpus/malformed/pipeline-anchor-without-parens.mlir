// CASE: pipeline: 'builtin.module' followed by junk instead of a parenthesised list
// ARGS: --pass-pipeline='builtin.module canonicalize'
// EXPECT: malformed pass pipeline
func.func @f() {
  return
}
