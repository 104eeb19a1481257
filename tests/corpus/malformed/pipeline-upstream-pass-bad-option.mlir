// CASE: pipeline: an option an upstream pass does not have
// ARGS: --pass-pipeline='builtin.module(canonicalize{nope=1})'
// EXPECT: unknown pass or bad options in 'canonicalize{nope=1}'
func.func @f() {
  return
}
