// CASE: pipeline: a pipeline whose parentheses do not balance
// ARGS: --pass-pipeline='builtin.module(canonicalize'
// EXPECT: unbalanced
func.func @f() {
  return
}
