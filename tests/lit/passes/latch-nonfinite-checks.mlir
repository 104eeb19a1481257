// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-nonfinite-checks{phase=mark})' | FileCheck %s --check-prefix=MARK
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-kernels)' | FileCheck %s --check-prefix=KERNELS
// The new floating-point state values whose last writer is an all-parallel generic that
// writes every element (%w's update: in place, through a transposed map; %v's: four
// columns a thread) are checked by the kernel that stores them: a NaN/inf clears the flag.
// A value whose last writer writes a part (the copy into %m's first row) and an integer
// counter are left to the runtime's check kernel.

#id = affine_map<(d0, d1) -> (d0, d1)>
#t = affine_map<(d0, d1) -> (d1, d0)>
#s = affine_map<(d0, d1) -> ()>
// MARK-LABEL: func.func @update(
// MARK: %[[W:.*]] = memref.alloc() {latch.finite_covered} : memref<8x4xf32>
// MARK: %[[M:.*]] = memref.alloc() : memref<8x4xf32>
// MARK: %[[N:.*]] = memref.alloc() : memref<i64>
// MARK: %[[V:.*]] = memref.alloc() {latch.finite_covered} : memref<8x4xf32>
// MARK: return %[[W]], %[[M]], %[[N]], %[[V]]

// KERNELS-LABEL: func.func @update(
// KERNELS: %[[FLAG:.*]] = memref.alloc() {latch.nonfinite_flag} : memref<i32>
// KERNELS: memref.alloc() {latch.finite_checked, latch.finite_covered} : memref<8x4xf32>
// KERNELS: gpu.launch_func {{.*}} args({{.*}}, %[[FLAG]] : memref<i32>)
// KERNELS: memref.alloc() : memref<8x4xf32>
// KERNELS: memref.alloc() : memref<i64>
// KERNELS: memref.alloc() {latch.finite_checked, latch.finite_covered} : memref<8x4xf32>
// KERNELS: gpu.launch_func {{.*}} args({{.*}}, %[[FLAG]] : memref<i32>)
// KERNELS: return
// the gradient's transposed copy into %w's buffer comes first: not checked
// KERNELS: gpu.func @update_kernel(%{{.*}}: memref<4x8xf32>, %{{.*}}: memref<8x4xf32>)
// KERNELS-NOT: cmpf
// KERNELS: gpu.return
// KERNELS: gpu.func @update_kernel(
// KERNELS: memref.store %[[P:[0-9]+]], %{{.*}} : memref<8x4xf32>
// KERNELS-NEXT: %[[D:.*]] = arith.subf %[[P]], %[[P]] : f32
// KERNELS-NEXT: %[[BAD:.*]] = arith.cmpf uno, %[[D]], %[[D]] : f32
// KERNELS-NEXT: cf.cond_br %[[BAD]]
// KERNELS: memref.store %{{.*}}, %{{.*}}[] : memref<i32>
// %m is written last by the copy of one row, the counter is an integer: no checks
// KERNELS: vector.store %{{.*}} : memref<8x4xf32>, vector<4xf32>
// KERNELS-NOT: cmpf
// KERNELS: memref.store %{{.*}}, %{{.*}}[] : memref<i64>
// KERNELS-NOT: cmpf
// KERNELS: vector.store %[[X:[0-9]+]], %{{.*}} : memref<8x4xf32>, vector<4xf32>
// KERNELS-NEXT: %[[DV:.*]] = arith.subf %[[X]], %[[X]] : vector<4xf32>
// KERNELS-NEXT: %[[BADV:.*]] = arith.cmpf uno, %[[DV]], %[[DV]] : vector<4xf32>
// KERNELS-NEXT: %[[ANY:.*]] = vector.reduction <or>, %[[BADV]] : vector<4xi1> into i1
// KERNELS-NEXT: cf.cond_br %[[ANY]]
// KERNELS: memref.store %{{.*}}, %{{.*}}[] : memref<i32>
func.func @update(%w0: memref<8x4xf32>, %m0: memref<8x4xf32>, %n0: memref<i64>,
                  %v0: memref<8x4xf32>, %g: memref<4x8xf32>, %lr: memref<f32>)
    -> (memref<8x4xf32>, memref<8x4xf32>, memref<i64>, memref<8x4xf32>)
    attributes {latch.abi = {num_inputs = 2 : i64, num_returns = 4 : i64,
                 states = [{kind = "param", name = "w", type = tensor<8x4xf32>},
                           {kind = "moment", name = "m", type = tensor<8x4xf32>},
                           {kind = "counter", name = "step", type = tensor<i64>},
                           {kind = "moment", name = "v", type = tensor<8x4xf32>}]}} {
  %w = memref.alloc() : memref<8x4xf32>
  // the gradient is written into the buffer first (transposed), then updated in place
  linalg.generic {indexing_maps = [#id, #t], iterator_types = ["parallel", "parallel"]}
      ins(%g : memref<4x8xf32>) outs(%w : memref<8x4xf32>) {
  ^bb0(%x: f32, %o: f32):
    linalg.yield %x : f32
  }
  linalg.generic {indexing_maps = [#t, #s, #t, #t], iterator_types = ["parallel", "parallel"]}
      ins(%w0, %lr, %w : memref<8x4xf32>, memref<f32>, memref<8x4xf32>) outs(%w : memref<8x4xf32>) {
  ^bb0(%p: f32, %r: f32, %d: f32, %o: f32):
    %u = arith.mulf %r, %d : f32
    %n = arith.subf %p, %u : f32
    linalg.yield %n : f32
  }
  %m = memref.alloc() : memref<8x4xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m0 : memref<8x4xf32>) outs(%m : memref<8x4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %h = arith.addf %x, %x : f32
    linalg.yield %h : f32
  }
  %row = memref.subview %m[0, 0] [1, 4] [1, 1] : memref<8x4xf32> to memref<4xf32, strided<[1]>>
  %grow = memref.subview %g[0, 0] [1, 4] [1, 1] : memref<4x8xf32> to memref<4xf32, strided<[1]>>
  memref.copy %grow, %row : memref<4xf32, strided<[1]>> to memref<4xf32, strided<[1]>>
  %n = memref.alloc() : memref<i64>
  %c1 = arith.constant 1 : i64
  %k = memref.load %n0[] : memref<i64>
  %k1 = arith.addi %k, %c1 : i64
  memref.store %k1, %n[] : memref<i64>
  %v = memref.alloc() : memref<8x4xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%v0 : memref<8x4xf32>) outs(%v : memref<8x4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %q = arith.mulf %x, %x : f32
    linalg.yield %q : f32
  }
  return %w, %m, %n, %v : memref<8x4xf32>, memref<8x4xf32>, memref<i64>, memref<8x4xf32>
}
