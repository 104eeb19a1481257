// RUN: %not latch-opt %t.does-not-exist.mlir 2>&1 | FileCheck %s
// CHECK: latch-opt: error: cannot read {{.*}}does-not-exist.mlir: No such file or directory
