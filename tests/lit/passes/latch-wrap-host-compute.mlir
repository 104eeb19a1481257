// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-wrap-host-compute)' | FileCheck %s
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-wrap-host-compute, latch-form-kernels)' | FileCheck %s --check-prefix=KERNELS
// Host code that touches buffers after bufferization (loads, stores, scalar math on loaded
// values, 0-d updates, copies) is wrapped, in order, into one-iteration scf.parallel loops
// (kernels with one working thread); full sum reductions become one-block gpu.launch ops; allocations between wrapped ops are hoisted in front; parallel linalg
// ops are left for latch-form-kernels.  After latch-form-kernels the host function holds only
// constants, allocations, gpu.launch_func and the return.

#id = affine_map<(d0) -> (d0)>
#all = affine_map<(d0) -> ()>
#s = affine_map<() -> ()>
// CHECK-LABEL: func.func @clip_and_count(
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel"]
// CHECK: scf.parallel (%{{.*}}) = (%{{.*}}) to (%{{.*}}) step (%{{.*}}) {
// CHECK:   memref.store %{{.*}}, %[[ACC:[a-z0-9_]+]][]
// CHECK:   scf.reduce
// CHECK: } {latch.serial}
// The full sum reduction becomes one block of 256 threads: strided partial sums in a
// register, gpu.all_reduce, thread 0 adds the total to the output.
// CHECK: %[[ONE:c1[_0-9]*]] = arith.constant 1 : index
// CHECK: %[[N:c256[_0-9]*]] = arith.constant 256 : index
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %[[ONE]], {{.*}} = %[[ONE]], {{.*}} = %[[ONE]]) threads(%[[TX:[a-z0-9_]+]], {{.*}}) in ({{.*}} = %[[N]], {{.*}} = %[[ONE]], {{.*}} = %[[ONE]])
// CHECK:   %[[PART:[0-9]+]] = scf.for %[[L:[a-z0-9_]+]] = %[[TX]] to %{{.*}} step %{{.*}} iter_args(%[[P:[a-z0-9_]+]] = %{{.*}}) -> (f32)
// CHECK:     %[[X:[0-9]+]] = memref.load %{{.*}}[%[[L]]]
// CHECK:     %[[S:[0-9]+]] = arith.addf %[[P]], %[[X]]
// CHECK:     scf.yield %[[S]]
// CHECK:   %[[TOT:[0-9]+]] = gpu.all_reduce add %[[PART]] uniform
// CHECK:   scf.if
// CHECK:     %[[OLD:[0-9]+]] = memref.load %[[ACC]][]
// CHECK:     arith.addf %[[OLD]], %[[TOT]]
// CHECK:   gpu.terminator
// The scalar tail: the allocation between wrapped ops is hoisted in front of the loop.
// CHECK: %[[COEF:[a-z0-9_]+]] = memref.alloc() {{.*}}latch.pinned
// CHECK: %[[CNT:[a-z0-9_]+]] = memref.alloc() {{.*}}latch.pinned
// CHECK: scf.parallel (%{{.*}}) = (%{{.*}}) to (%{{.*}}) step (%{{.*}}) {
// CHECK:   memref.load %[[ACC]][]
// CHECK:   math.sqrt
// CHECK:   memref.store %{{.*}}, %[[COEF]][]
// CHECK:   memref.load %arg1[]
// CHECK:   arith.addi
// CHECK:   memref.store %{{.*}}, %[[CNT]][]
// CHECK:   scf.reduce
// CHECK: } {latch.serial}
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel"]
// CHECK: return
// KERNELS-LABEL: func.func @clip_and_count(
// KERNELS-NOT: memref.load
// KERNELS-NOT: memref.store
// KERNELS-NOT: scf.
// KERNELS-NOT: cf.
// KERNELS-COUNT-5: gpu.launch_func
// KERNELS-NEXT: return
func.func @clip_and_count(%g: memref<1024xf32>, %count: memref<i64>) -> (memref<1024xf32>, memref<i64>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %c1 = arith.constant 1 : i64
  %sq = memref.alloc() {latch.offset = 0 : i64} : memref<1024xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%g : memref<1024xf32>) outs(%sq : memref<1024xf32>) {
  ^bb0(%a: f32, %o: f32):
    %p = arith.mulf %a, %a : f32
    linalg.yield %p : f32
  }
  %acc = memref.alloc() {latch.offset = 4096 : i64} : memref<f32>
  memref.store %zero, %acc[] : memref<f32>
  linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction"]} ins(%sq : memref<1024xf32>) outs(%acc : memref<f32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %o, %a : f32
    linalg.yield %s : f32
  }
  %t = memref.load %acc[] : memref<f32>
  %n = math.sqrt %t : f32
  %d = arith.addf %n, %one : f32
  %coef = arith.divf %one, %d : f32
  %cbuf = memref.alloc() {latch.pinned} : memref<f32>
  memref.store %coef, %cbuf[] : memref<f32>
  %k = memref.load %count[] : memref<i64>
  %k1 = arith.addi %k, %c1 : i64
  %newcount = memref.alloc() {latch.pinned} : memref<i64>
  memref.store %k1, %newcount[] : memref<i64>
  %out = memref.alloc() {latch.pinned} : memref<1024xf32>
  linalg.generic {indexing_maps = [#id, #all, #id], iterator_types = ["parallel"]} ins(%g, %cbuf : memref<1024xf32>, memref<f32>) outs(%out : memref<1024xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %p = arith.mulf %a, %c : f32
    linalg.yield %p : f32
  }
  return %out, %newcount : memref<1024xf32>, memref<i64>
}

// -----

// memref.copy of rank >= 1 becomes a parallel linalg.copy (an ordinary kernel); of rank 0 a
// load + store that is wrapped.
// CHECK-LABEL: func.func @copies(
// CHECK: linalg.copy {{.*}}ins(%arg0 : memref<16xf32>) outs(%{{.*}} : memref<16xf32>)
// CHECK: scf.parallel
// CHECK:   %[[V:.*]] = memref.load %arg1[]
// CHECK:   memref.store %[[V]]
// CHECK-NOT: memref.copy
// KERNELS-LABEL: func.func @copies(
// KERNELS-COUNT-2: gpu.launch_func
// KERNELS-NEXT: return
func.func @copies(%a: memref<16xf32>, %s: memref<f32>) -> (memref<16xf32>, memref<f32>) {
  %b = memref.alloc() {latch.pinned} : memref<16xf32>
  memref.copy %a, %b : memref<16xf32> to memref<16xf32>
  %t = memref.alloc() {latch.pinned} : memref<f32>
  memref.copy %s, %t : memref<f32> to memref<f32>
  return %b, %t : memref<16xf32>, memref<f32>
}
