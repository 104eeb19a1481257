// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-vector-atomics{chip=sm_90a features=+ptx81})' | FileCheck %s
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-vector-atomics{chip=sm_90a features=+ptx80})' | FileCheck %s --check-prefix=PTX80
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-vector-atomics{chip=sm_90a features=+ptx81}, gpu-lower-to-nvvm-pipeline{cubin-chip=sm_90a cubin-features=+ptx81 cubin-format=isa kernel-bare-ptr-calling-convention=true})' --emit=ptx | FileCheck %s --check-prefix=PTX
// Four f32 atomic adds in a row to columns 4j .. 4j+3 of one row of a [70, 48] buffer (a
// scatter kernel's thread): one vector reduction at the element's byte address.  Before
// PTX 8.1 there is no vector form and the adds stay.

// CHECK-LABEL: gpu.func @four_columns(
// CHECK: %[[BASE:.*]] = memref.extract_aligned_pointer_as_index %arg2
// CHECK: arith.muli %arg0, %c48
// CHECK: %[[A:.*]] = arith.index_cast %{{.*}} : index to i64
// CHECK: llvm.inline_asm has_side_effects {{.*}}red.global.add.v4.f32 [%ga], {$1, $2, $3, $4}; }", "l,f,f,f,f" %[[A]], %arg3, %arg4, %arg5, %arg6
// CHECK-NOT: memref.atomic_rmw
// PTX80-LABEL: gpu.func @four_columns(
// PTX80-COUNT-4: memref.atomic_rmw addf
// PTX-LABEL: .entry four_columns(
// PTX: red.global.add.v4.f32
// PTX-NOT: atom.
// PTX: ret;
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @four_columns(%row: index, %j: index, %out: memref<70x48xf32>, %a: f32, %b: f32, %c: f32, %d: f32) kernel {
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %c4 = arith.constant 4 : index
      %n = arith.muli %j, %c4 : index
      %n1 = arith.addi %n, %c1 : index
      %n2 = arith.addi %n, %c2 : index
      %n3 = arith.addi %n, %c3 : index
      %0 = memref.atomic_rmw addf %a, %out[%row, %n] : (f32, memref<70x48xf32>) -> f32
      %1 = memref.atomic_rmw addf %b, %out[%row, %n1] : (f32, memref<70x48xf32>) -> f32
      %2 = memref.atomic_rmw addf %c, %out[%row, %n2] : (f32, memref<70x48xf32>) -> f32
      %3 = memref.atomic_rmw addf %d, %out[%row, %n3] : (f32, memref<70x48xf32>) -> f32
      gpu.return
    }
  }
}

// -----
// Not provably 16-byte aligned or not four consecutive elements: the adds stay.  @any_base:
// the first column is not known to be a multiple of 4.  @odd_rows: rows of 50 floats (the
// second row starts 8 bytes past a 16-byte boundary).  @gap: columns n, n+1, n+2, n+4.
// @used: an add's old value is read.
// CHECK-LABEL: gpu.func @any_base(
// CHECK-COUNT-4: memref.atomic_rmw addf
// CHECK-LABEL: gpu.func @odd_rows(
// CHECK-COUNT-4: memref.atomic_rmw addf
// CHECK-LABEL: gpu.func @gap(
// CHECK-COUNT-4: memref.atomic_rmw addf
// CHECK-LABEL: gpu.func @used(
// CHECK-COUNT-4: memref.atomic_rmw addf
// CHECK-NOT: llvm.inline_asm
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @any_base(%row: index, %n: index, %out: memref<70x48xf32>, %a: f32) kernel {
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %n1 = arith.addi %n, %c1 : index
      %n2 = arith.addi %n, %c2 : index
      %n3 = arith.addi %n, %c3 : index
      %0 = memref.atomic_rmw addf %a, %out[%row, %n] : (f32, memref<70x48xf32>) -> f32
      %1 = memref.atomic_rmw addf %a, %out[%row, %n1] : (f32, memref<70x48xf32>) -> f32
      %2 = memref.atomic_rmw addf %a, %out[%row, %n2] : (f32, memref<70x48xf32>) -> f32
      %3 = memref.atomic_rmw addf %a, %out[%row, %n3] : (f32, memref<70x48xf32>) -> f32
      gpu.return
    }
    gpu.func @odd_rows(%row: index, %j: index, %out: memref<70x50xf32>, %a: f32) kernel {
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %c4 = arith.constant 4 : index
      %n = arith.muli %j, %c4 : index
      %n1 = arith.addi %n, %c1 : index
      %n2 = arith.addi %n, %c2 : index
      %n3 = arith.addi %n, %c3 : index
      %0 = memref.atomic_rmw addf %a, %out[%row, %n] : (f32, memref<70x50xf32>) -> f32
      %1 = memref.atomic_rmw addf %a, %out[%row, %n1] : (f32, memref<70x50xf32>) -> f32
      %2 = memref.atomic_rmw addf %a, %out[%row, %n2] : (f32, memref<70x50xf32>) -> f32
      %3 = memref.atomic_rmw addf %a, %out[%row, %n3] : (f32, memref<70x50xf32>) -> f32
      gpu.return
    }
    gpu.func @gap(%row: index, %j: index, %out: memref<70x48xf32>, %a: f32) kernel {
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c4 = arith.constant 4 : index
      %n = arith.muli %j, %c4 : index
      %n1 = arith.addi %n, %c1 : index
      %n2 = arith.addi %n, %c2 : index
      %n4 = arith.addi %n, %c4 : index
      %0 = memref.atomic_rmw addf %a, %out[%row, %n] : (f32, memref<70x48xf32>) -> f32
      %1 = memref.atomic_rmw addf %a, %out[%row, %n1] : (f32, memref<70x48xf32>) -> f32
      %2 = memref.atomic_rmw addf %a, %out[%row, %n2] : (f32, memref<70x48xf32>) -> f32
      %3 = memref.atomic_rmw addf %a, %out[%row, %n4] : (f32, memref<70x48xf32>) -> f32
      gpu.return
    }
    gpu.func @used(%row: index, %j: index, %out: memref<70x48xf32>, %a: f32, %r: memref<f32>) kernel {
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %c4 = arith.constant 4 : index
      %n = arith.muli %j, %c4 : index
      %n1 = arith.addi %n, %c1 : index
      %n2 = arith.addi %n, %c2 : index
      %n3 = arith.addi %n, %c3 : index
      %0 = memref.atomic_rmw addf %a, %out[%row, %n] : (f32, memref<70x48xf32>) -> f32
      %1 = memref.atomic_rmw addf %a, %out[%row, %n1] : (f32, memref<70x48xf32>) -> f32
      %2 = memref.atomic_rmw addf %a, %out[%row, %n2] : (f32, memref<70x48xf32>) -> f32
      %3 = memref.atomic_rmw addf %a, %out[%row, %n3] : (f32, memref<70x48xf32>) -> f32
      memref.store %3, %r[] : memref<f32>
      gpu.return
    }
  }
}
