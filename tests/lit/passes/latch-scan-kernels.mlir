// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-scan-kernels)' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-scan-kernels, latch-form-kernels)' | FileCheck %s --check-prefix=KERNELS
// RUN: %not latch-opt %s --pass-pipeline='builtin.module(latch-form-scan-kernels{max-shared=64})' 2>&1 | FileCheck %s --check-prefix=SHARED
//
// A bufferized GradLev scan (examples/gradlev_small.py at 2 heads, d 8, 16 tokens; the
// step is W <- W - 0.1 (W k - v) k^T, o = W q): the scf.for over tokens becomes ONE
// gpu.launch.  Heads and rows of W are independent problems (batch classes), one block
// each (16); the carry W (a row of 8 per problem) ping-pongs between the two halves of
// one workgroup buffer, the temporaries live in workgroup memory too, the token loop runs
// inside the kernel with barriers between dependent ops, and the final W is copied out
// into a fresh buffer that replaces the loop's result.
// CHECK-LABEL: func.func @main(
// CHECK-NOT: scf.for
// CHECK: %[[W:.+]] = memref.alloc() : memref<2x8x8xf32>
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %c16{{.*}}, {{.*}} = %c1{{.*}}, {{.*}} = %c1{{.*}}) threads({{.*}}) in ({{.*}} = %c256{{.*}}) workgroup(%[[C:.+]] : memref<16xf32, #gpu.address_space<workgroup>>, %{{.+}} : memref<1xf32, #gpu.address_space<workgroup>>, %{{.+}} : memref<1xf32, #gpu.address_space<workgroup>>)
// carry in: from the input W0 into the workgroup buffer
// CHECK: memref.store %{{.*}}, %[[C]][
// CHECK: gpu.barrier
// CHECK: scf.for %[[T:.+]] = %{{.*}} to %c16{{.*}} step
// the ping-pong halves: (t & 1) * 8 and 8 - that
// CHECK: arith.andi %[[T]]
// CHECK: gpu.barrier
// xs slices are read from global memory at step t, the ys slice written there
// CHECK: memref.load %collapse_shape{{.*}} : memref<256xf32>
// CHECK: gpu.barrier
// CHECK: memref.store %{{.*}}, %collapse_shape{{.*}} : memref<256xf32>
// CHECK-NEXT: }
// a barrier ends every step
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: }
// carry out, into the result buffer
// CHECK: memref.store %{{.*}}, %{{.*}} : memref<128xf32>
// CHECK: gpu.terminator
// CHECK-NOT: gpu.launch
// CHECK: return %[[W]], %alloc

// One launch, no host loop left.
// KERNELS-LABEL: func.func @main(
// KERNELS-COUNT-1: gpu.launch_func
// KERNELS-NOT: gpu.launch_func
// KERNELS: gpu.module @main_kernel
// KERNELS: gpu.func @main_kernel({{.*}}) workgroup({{.*}}#gpu.address_space<workgroup>
// KERNELS: gpu.barrier

// SHARED: error: latch-form-scan-kernels: cannot make the scan loop at {{.*}} one kernel: at {{.*}}: the carry and temporaries of one block need {{[0-9]+}} bytes of workgroup memory, more than max-shared=64

#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#map3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map4 = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
module {
  func.func @main(%arg0: memref<2x8x8xf32>, %arg1: memref<16x2x8xf32>, %arg2: memref<16x2x8xf32>, %arg3: memref<16x2x8xf32>) -> (memref<2x8x8xf32>, memref<16x2x8xf32>) attributes {latch.arena_bytes = 0 : i64, latch.buffer_bytes = 0 : i64} {
    %cst = arith.constant 5.000000e-01 : f32
    %cst_0 = arith.constant 0.000000e+00 : f32
    %cst_1 = arith.constant 2.000000e+00 : f32
    %cst_2 = arith.constant 1.000000e-01 : f64
    %c1_i64 = arith.constant 1 : i64
    %c1 = arith.constant 1 : index
    %c16 = arith.constant 16 : index
    %c0 = arith.constant 0 : index
    %alloc = memref.alloc() {alignment = 64 : i64, latch.pinned} : memref<16x2x8xf32>
    %0 = scf.for %arg4 = %c0 to %c16 step %c1 iter_args(%arg5 = %arg0) -> (memref<2x8x8xf32>) {
      %subview = memref.subview %arg1[%arg4, 0, 0] [1, 2, 8] [1, 1, 1] : memref<16x2x8xf32> to memref<2x8xf32, strided<[8, 1], offset: ?>>
      %subview_3 = memref.subview %arg2[%arg4, 0, 0] [1, 2, 8] [1, 1, 1] : memref<16x2x8xf32> to memref<2x8xf32, strided<[8, 1], offset: ?>>
      %subview_4 = memref.subview %arg3[%arg4, 0, 0] [1, 2, 8] [1, 1, 1] : memref<16x2x8xf32> to memref<2x8xf32, strided<[8, 1], offset: ?>>
      %expand_shape = memref.expand_shape %subview_3 [[0], [1, 2]] output_shape [2, 8, 1] : memref<2x8xf32, strided<[8, 1], offset: ?>> into memref<2x8x1xf32, strided<[8, 1, 1], offset: ?>>
      %alloc_5 = memref.alloc() {alignment = 64 : i64} : memref<2x8x1xf32>
      linalg.generic {indexing_maps = [#map], iterator_types = ["parallel", "parallel", "parallel"]} outs(%alloc_5 : memref<2x8x1xf32>) {
      ^bb0(%out: f32):
        linalg.yield %cst_0 : f32
      }
      %alloc_6 = memref.alloc() {alignment = 64 : i64} : memref<2x8x1xf32>
      memref.copy %alloc_5, %alloc_6 : memref<2x8x1xf32> to memref<2x8x1xf32>
      linalg.generic {indexing_maps = [#map1, #map2, #map3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg5, %expand_shape : memref<2x8x8xf32>, memref<2x8x1xf32, strided<[8, 1, 1], offset: ?>>) outs(%alloc_6 : memref<2x8x1xf32>) {
      ^bb0(%in: f32, %in_11: f32, %out: f32):
        %1 = arith.mulf %in, %in_11 : f32
        %2 = arith.addf %out, %1 : f32
        linalg.yield %2 : f32
      }
      %expand_shape_7 = memref.expand_shape %subview_4 [[0], [1, 2]] output_shape [2, 8, 1] : memref<2x8xf32, strided<[8, 1], offset: ?>> into memref<2x8x1xf32, strided<[8, 1, 1], offset: ?>>
      %alloc_8 = memref.alloc() {alignment = 64 : i64} : memref<2x8x8xf32>
      linalg.generic {indexing_maps = [#map], iterator_types = ["parallel", "parallel", "parallel"]} outs(%alloc_8 : memref<2x8x8xf32>) {
      ^bb0(%out: f32):
        linalg.yield %cst_0 : f32
      }
      linalg.generic {indexing_maps = [#map1, #map1, #map4, #map3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%alloc_6, %expand_shape_7, %expand_shape : memref<2x8x1xf32>, memref<2x8x1xf32, strided<[8, 1, 1], offset: ?>>, memref<2x8x1xf32, strided<[8, 1, 1], offset: ?>>) outs(%alloc_8 : memref<2x8x8xf32>) {
      ^bb0(%in: f32, %in_11: f32, %in_12: f32, %out: f32):
        %1 = arith.subf %in, %in_11 : f32
        %2 = math.fpowi %1, %c1_i64 : f32, i64
        %3 = arith.mulf %2, %cst_1 : f32
        %4 = arith.mulf %3, %cst : f32
        %5 = arith.mulf %4, %in_12 : f32
        %6 = arith.addf %out, %5 : f32
        linalg.yield %6 : f32
      }
      linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg5, %alloc_8 : memref<2x8x8xf32>, memref<2x8x8xf32>) outs(%alloc_8 : memref<2x8x8xf32>) {
      ^bb0(%in: f32, %in_11: f32, %out: f32):
        %1 = arith.truncf %cst_2 : f64 to f32
        %2 = arith.mulf %in_11, %1 : f32
        %3 = arith.subf %in, %2 : f32
        linalg.yield %3 : f32
      }
      %expand_shape_9 = memref.expand_shape %subview [[0], [1, 2]] output_shape [2, 8, 1] : memref<2x8xf32, strided<[8, 1], offset: ?>> into memref<2x8x1xf32, strided<[8, 1, 1], offset: ?>>
      linalg.generic {indexing_maps = [#map1, #map2, #map3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%alloc_8, %expand_shape_9 : memref<2x8x8xf32>, memref<2x8x1xf32, strided<[8, 1, 1], offset: ?>>) outs(%alloc_5 : memref<2x8x1xf32>) {
      ^bb0(%in: f32, %in_11: f32, %out: f32):
        %1 = arith.mulf %in, %in_11 : f32
        %2 = arith.addf %out, %1 : f32
        linalg.yield %2 : f32
      }
      %collapse_shape = memref.collapse_shape %alloc_5 [[0], [1, 2]] : memref<2x8x1xf32> into memref<2x8xf32>
      %subview_10 = memref.subview %alloc[%arg4, 0, 0] [1, 2, 8] [1, 1, 1] : memref<16x2x8xf32> to memref<2x8xf32, strided<[8, 1], offset: ?>>
      memref.copy %collapse_shape, %subview_10 : memref<2x8xf32> to memref<2x8xf32, strided<[8, 1], offset: ?>>
      scf.yield %alloc_8 : memref<2x8x8xf32>
    }
    return %0, %alloc : memref<2x8x8xf32>, memref<16x2x8xf32>
  }
}
