// CASE: pipeline: a Latch module pass nested under func.func
// ARGS: --pass-pipeline='builtin.module(func.func(latch-verify))'
// EXPECT: unknown pass or bad options
func.func @f() {
  return
}
