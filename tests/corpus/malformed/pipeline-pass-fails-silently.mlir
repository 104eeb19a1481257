// CASE: pipeline: a pass that fails without any diagnostic (canonicalize cannot converge in 1 iteration)
// ARGS: --pass-pipeline='builtin.module(canonicalize{test-convergence=true max-iterations=1})'
// EXPECT: no pass reported why
func.func @f(%a: i32) -> i32 {
  %c = arith.constant 0 : i32
  %b = arith.addi %a, %c : i32
  return %b : i32
}
