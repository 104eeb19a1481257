// RUN: %not latch-opt %s 2>&1 | FileCheck %s
// A syntax error is reported at its line and column, with exit status 1 and no traceback.

// CHECK: syntax-error.mlir:[[@LINE+3]]:{{[0-9]+}}: error:
// CHECK-NOT: Traceback
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %b = arith.addf %a, : tensor<4xf32>
  return %b : tensor<4xf32>
}
