// CASE: pipeline: a pass name that does not exist
// ARGS: --pass-pipeline='builtin.module(no-such-pass)'
// EXPECT: unknown pass or bad options in 'no-such-pass'
func.func @f() {
  return
}
