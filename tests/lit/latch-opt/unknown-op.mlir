// RUN: %not latch-opt %s 2>&1 | FileCheck %s
// Unknown ops of an unknown dialect and of the latch dialect are located errors.

// CHECK: unknown-op.mlir:[[@LINE+3]]:{{[0-9]+}}: error: {{.*}}foo.bar
// CHECK-NOT: Traceback
func.func @f() {
  "foo.bar"() : () -> ()
  return
}
