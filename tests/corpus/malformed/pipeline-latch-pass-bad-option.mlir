// CASE: pipeline: an option a Latch pass does not have
// ARGS: --pass-pipeline='builtin.module(latch-verify{strict=1})'
// EXPECT: pass 'latch-verify' has no option 'strict'
func.func @f() {
  return
}
