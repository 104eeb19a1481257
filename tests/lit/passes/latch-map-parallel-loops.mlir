// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-map-parallel-loops)' | FileCheck %s
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-map-parallel-loops{block=64})' | FileCheck %s --check-prefix=B64
// Each top-level scf.parallel with constant bounds becomes one 1-D gpu.launch over its
// flattened iteration space, the first loop varying fastest; lower bounds and steps are
// applied after the split; threads past the end are masked.  Here (1..10 step 3) x
// (1..9 step 2) = 3 x 4 = 12 iterations: one block of 32 threads (12 rounded up to a
// warp); i = 1 + 3 * (t % 3), j = 1 + 2 * (t / 3).

// CHECK-LABEL: func.func @steps(
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %[[ONE:.*]], {{.*}}) threads(%[[T:.*]], %{{.*}}, %{{.*}}) in ({{.*}} = %c32,
// CHECK: %[[IN:.*]] = arith.cmpi ult, %[[T]], %c12
// CHECK: scf.if %[[IN]]
// CHECK: %[[C3:.*]] = arith.constant 3 : index
// CHECK: %[[I0:.*]] = arith.remui %[[T]], %[[C3]] : index
// CHECK: %[[J0:.*]] = arith.divui %[[T]], %[[C3]] : index
// CHECK: %[[I1:.*]] = arith.muli %[[I0]], %{{.*}} : index
// CHECK: %[[I:.*]] = arith.addi %[[I1]], %{{.*}} : index
// CHECK: %[[S2:.*]] = arith.constant 2 : index
// CHECK: %[[J1:.*]] = arith.muli %[[J0]], %[[S2]] : index
// CHECK: %[[J:.*]] = arith.addi %[[J1]], %{{.*}} : index
// CHECK: memref.store %{{.*}}, %arg0[%[[I]], %[[J]]]
// CHECK-NOT: scf.parallel
func.func @steps(%a: memref<10x9xf32>) {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c10 = arith.constant 10 : index
  %c9 = arith.constant 9 : index
  %z = arith.constant 0.0 : f32
  scf.parallel (%i, %j) = (%c1, %c1) to (%c10, %c9) step (%c3, %c2) {
    memref.store %z, %a[%i, %j] : memref<10x9xf32>
    scf.reduce
  }
  return
}

// -----
// 1000 iterations: 4 blocks of 256 threads (block=64: 16 blocks of 64), masked past 1000.
// CHECK-LABEL: func.func @thousand(
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %c4, {{.*}}) threads({{.*}}) in ({{.*}} = %c256,
// CHECK: arith.cmpi ult, %{{.*}}, %c1000
// B64-LABEL: func.func @thousand(
// B64: gpu.launch blocks({{.*}}) in ({{.*}} = %c16, {{.*}}) threads({{.*}}) in ({{.*}} = %c64,
func.func @thousand(%a: memref<1000xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1000 : index
  %z = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    memref.store %z, %a[%i] : memref<1000xf32>
    scf.reduce
  }
  return
}

// -----
// A loop with a run-time bound is left to the upstream mapping passes that follow in
// latch-form-kernels.
// CHECK-LABEL: func.func @dynamic(
// CHECK-NOT: gpu.launch
// CHECK: scf.parallel
func.func @dynamic(%a: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    memref.store %z, %a[%i] : memref<?xf32>
    scf.reduce
  }
  return
}
