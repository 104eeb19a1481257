// CASE: pipeline: pass options whose brace is never closed
// ARGS: --pass-pipeline='builtin.module(cse{)'
// EXPECT: unbalanced
func.func @f() {
  return
}
