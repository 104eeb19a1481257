// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-bufferize)' | FileCheck %s
// Stage 'buffers': tensors become memrefs with identity layouts across function boundaries.

// CHECK-LABEL: func.func @add(
// CHECK-SAME: %{{.*}}: memref<8xf32>, %{{.*}}: memref<8xf32>) -> memref<8xf32>
// CHECK: memref.alloc() {{.*}} : memref<8xf32>
// CHECK: linalg.generic
// CHECK-NOT: tensor<
// CHECK: return %{{.*}} : memref<8xf32>
#id = affine_map<(d0) -> (d0)>
func.func @add(%a: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%a, %b : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}
