// RUN: head -n 7 %s > %t.mlir
// RUN: %not latch-opt %t.mlir 2>&1 | FileCheck %s
// A file cut off in the middle of an op is a located error, not a crash.

// CHECK: truncated.mlir.tmp.mlir:{{[0-9]+}}:{{[0-9]+}}: error:
// CHECK-NOT: Traceback
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %b = arith.addf %a, %a : tensor<4xf32>
  return %b : tensor<4xf32>
}
