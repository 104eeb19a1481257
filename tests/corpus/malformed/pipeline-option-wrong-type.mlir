// CASE: pipeline: a non-integer value for an integer pass option
// ARGS: --pass-pipeline='builtin.module(latch-plan-memory{alignment=abc})'
// EXPECT: option 'alignment' expects int, got 'abc'
func.func @f() {
  return
}
