// RUN: %PYTHON -c "print('func.func @f() {' + '\"test.op\"() ({' * 5000 + '}) : () -> ()' * 5000 + 'return }')" > %t.mlir
// RUN: %not latch-opt %t.mlir 2>&1 | FileCheck %s
// Pathologically deep nesting is refused with a located error instead of overflowing the stack.

// CHECK: .mlir:1:{{[0-9]+}}: error: nesting deeper than 512 levels
