// CASE: pipeline: a zero block size for latch-form-kernels
// ARGS: --pass-pipeline='builtin.module(latch-form-kernels{block=0})'
// EXPECT: error
func.func @f() {
  return
}
