// CASE: pipeline: --verify-diagnostics with an expected error that is never produced
// ARGS: --verify-diagnostics
// EXPECT: was not produced
// expected-error @+1 {{this error never happens}}
func.func @f() {
  return
}
