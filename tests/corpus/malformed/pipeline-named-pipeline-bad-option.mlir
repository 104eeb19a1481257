// CASE: pipeline: an option a named pipeline does not have
// ARGS: --pass-pipeline='builtin.module(latch-to-ptx{colour=red})'
// EXPECT: pipeline 'latch-to-ptx' has no option 'colour'
func.func @f() {
  return
}
