// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-dependent-launches{chip=sm_90a features=+ptx81})' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-dependent-launches{chip=sm_80 features=+ptx81})' | FileCheck %s --check-prefix=OLD
// Every kernel begins by letting the next kernel on its stream launch, then waits for the
// kernels before it (programmatic dependent launch, sm_90+); functions that are not
// kernels are left alone, and so is everything on older chips.

// CHECK: module attributes {latch.dependent_launches}
// CHECK-LABEL: gpu.func @scale(
// CHECK-NEXT: llvm.inline_asm has_side_effects "griddepcontrol.launch_dependents;", "~{memory}"
// CHECK-NEXT: llvm.inline_asm has_side_effects "griddepcontrol.wait;", "~{memory}"
// CHECK-NEXT: arith.constant
// CHECK-LABEL: gpu.func @helper(
// CHECK-NOT: griddepcontrol
// CHECK: gpu.return
// OLD-NOT: griddepcontrol
// OLD-NOT: latch.dependent_launches
module {
  gpu.module @kernels {
    gpu.func @scale(%x: memref<4xf32>) kernel {
      %c0 = arith.constant 0 : index
      %v = memref.load %x[%c0] : memref<4xf32>
      %w = arith.addf %v, %v : f32
      memref.store %w, %x[%c0] : memref<4xf32>
      gpu.return
    }
    gpu.func @helper(%x: f32) {
      gpu.return
    }
  }
}
