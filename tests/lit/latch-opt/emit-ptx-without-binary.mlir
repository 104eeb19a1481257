// RUN: %not latch-opt %s --emit=ptx 2>&1 | FileCheck %s
// --emit=ptx needs a pipeline that produces a gpu.binary.

// CHECK: error: --emit=ptx: the module has no gpu.binary; run a pipeline that ends in one
func.func @f() {
  return
}
