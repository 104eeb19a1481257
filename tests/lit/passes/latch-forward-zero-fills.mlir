// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-forward-zero-fills)' | FileCheck %s
// A copy of a buffer that holds zeros (filled whole, nothing writing it since) becomes a
// zero fill of the copy's destination; the zero buffer, read by nothing else, loses its
// fill.  A copy of zeros that were overwritten in part since keeps reading them.

#id = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @index_add_into_zeros(
// CHECK-SAME: %[[SRC:.*]]: memref<4x8xf32>, %[[OUT:.*]]: memref<4x8xf32>)
// CHECK: %[[ZEROS:.*]] = memref.alloc() : memref<4x8xf32>
// CHECK-NEXT: %[[A:.*]] = memref.alloc() : memref<4x8xf32>
// CHECK-NEXT: %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: linalg.generic {{.*}} outs(%[[A]] : memref<4x8xf32>) {
// CHECK-NEXT: ^bb0(%{{.*}}: f32):
// CHECK-NEXT: linalg.yield %[[Z]] : f32
// CHECK: linalg.generic {{.*}} ins(%[[SRC]] : memref<4x8xf32>) outs(%[[A]] : memref<4x8xf32>)
// CHECK: arith.addf
// CHECK: linalg.generic {{.*}} ins(%[[A]] : memref<4x8xf32>) outs(%[[OUT]] : memref<4x8xf32>)
// CHECK-NOT: %[[ZEROS]]
// CHECK: return
func.func @index_add_into_zeros(%src: memref<4x8xf32>, %out: memref<4x8xf32>) {
  %z = arith.constant 0.0 : f32
  %zeros = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]} outs(%zeros : memref<4x8xf32>) {
  ^bb0(%o: f32):
    linalg.yield %z : f32
  }
  %a = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%zeros : memref<4x8xf32>) outs(%a : memref<4x8xf32>) {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%src : memref<4x8xf32>) outs(%a : memref<4x8xf32>) {
  ^bb0(%i: f32, %o: f32):
    %s = arith.addf %o, %i : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : memref<4x8xf32>) outs(%out : memref<4x8xf32>) {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  return
}

// -----
#id = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @overwritten_in_part(
// CHECK: linalg.generic {{.*}} outs(%[[ZEROS:.*]] : memref<4x8xf32>)
// CHECK: memref.store
// CHECK: linalg.generic {{.*}} ins(%[[ZEROS]] : memref<4x8xf32>) outs(%{{.*}} : memref<4x8xf32>)
func.func @overwritten_in_part(%out: memref<4x8xf32>) {
  %z = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %c0 = arith.constant 0 : index
  %zeros = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]} outs(%zeros : memref<4x8xf32>) {
  ^bb0(%o: f32):
    linalg.yield %z : f32
  }
  memref.store %one, %zeros[%c0, %c0] : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%zeros : memref<4x8xf32>) outs(%out : memref<4x8xf32>) {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  return
}
