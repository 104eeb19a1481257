// CASE: pipeline: a nested pipeline given to a named pipeline
// ARGS: --pass-pipeline='builtin.module(latch-lower-rules(cse))'
// EXPECT: takes no nested pipeline
func.func @f() {
  return
}
