// RUN: %not latch-opt %s 2>&1 | FileCheck %s
// An op the latch dialect does not define is a located error naming it.

// CHECK: unknown-latch-op.mlir:[[@LINE+2]]:{{[0-9]+}}: error: {{.*}}latch.frobnicate
func.func @f() {
  "latch.frobnicate"() : () -> ()
  return
}
