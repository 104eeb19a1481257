// RUN: %not latch-opt %s --pass-pipeline='builtin.module(no-such-pass)' 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: %not latch-opt %s --pass-pipeline='builtin.module(canonicalize' 2>&1 | FileCheck %s --check-prefix=UNBALANCED
// RUN: %not latch-opt %s --pass-pipeline='builtin.module(latch-to-ptx{colour=red})' 2>&1 | FileCheck %s --check-prefix=PIPEOPT
// RUN: %not latch-opt %s --pass-pipeline='builtin.module(latch-verify{strict=1})' 2>&1 | FileCheck %s --check-prefix=PASSOPT
// Bad pipelines are errors that name the problem; none is a traceback.

// UNKNOWN: error: unknown pass or bad options in 'no-such-pass'
// UNBALANCED: error: {{.*}}unbalanced
// PIPEOPT: error: pipeline 'latch-to-ptx' has no option 'colour' (options: chip, features, block)
// PASSOPT: error: pass 'latch-verify' has no option 'strict'
// UNKNOWN-NOT: Traceback
func.func @f() {
  return
}
