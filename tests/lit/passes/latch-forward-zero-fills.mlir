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

// -----
// A whole zero fill whose next use writes all but the last row (a generic writing the
// padded buffer's rows in place, passes/write_in_place.py): only the last row is filled,
// after that write.  A fill the next write leaves in the middle of stays whole.
#id2 = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @fill_the_rest(
// CHECK: %[[PAD:.*]] = memref.alloc() : memref<7x4xf32>
// CHECK-NEXT: %[[ROWS:.*]] = memref.subview %[[PAD]][0, 0] [6, 4] [1, 1]
// CHECK-NEXT: linalg.generic {{.*}} outs(%[[ROWS]] : memref<6x4xf32, strided<[4, 1]>>)
// CHECK: math.exp
// CHECK: %[[LAST:.*]] = memref.subview %[[PAD]][6, 0] [1, 4] [1, 1] : memref<7x4xf32> to memref<1x4xf32, strided<[4, 1], offset: 24>>
// CHECK-NEXT: %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: linalg.generic {{.*}} outs(%[[LAST]] : memref<1x4xf32, strided<[4, 1], offset: 24>>)
// CHECK-NEXT: ^bb0(%{{.*}}: f32):
// CHECK-NEXT: linalg.yield %[[Z]] : f32
// CHECK: %[[MID:.*]] = memref.alloc() : memref<8x4xf32>
// CHECK-NEXT: linalg.generic {{.*}} outs(%[[MID]] : memref<8x4xf32>)
func.func @fill_the_rest(%a: memref<6x4xf32>) -> (memref<7x4xf32>, memref<8x4xf32>) {
  %z = arith.constant 0.0 : f32
  %pad = memref.alloc() : memref<7x4xf32>
  linalg.generic {indexing_maps = [#id2], iterator_types = ["parallel", "parallel"]} outs(%pad : memref<7x4xf32>) {
  ^bb0(%o: f32):
    linalg.yield %z : f32
  }
  %rows = memref.subview %pad[0, 0] [6, 4] [1, 1] : memref<7x4xf32> to memref<6x4xf32, strided<[4, 1]>>
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%a : memref<6x4xf32>) outs(%rows : memref<6x4xf32, strided<[4, 1]>>) {
  ^bb0(%x: f32, %o: f32):
    %e = math.exp %x : f32
    linalg.yield %e : f32
  }
  %mid = memref.alloc() : memref<8x4xf32>
  linalg.generic {indexing_maps = [#id2], iterator_types = ["parallel", "parallel"]} outs(%mid : memref<8x4xf32>) {
  ^bb0(%o: f32):
    linalg.yield %z : f32
  }
  %inner = memref.subview %mid[1, 0] [6, 4] [1, 1] : memref<8x4xf32> to memref<6x4xf32, strided<[4, 1], offset: 4>>
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%a : memref<6x4xf32>) outs(%inner : memref<6x4xf32, strided<[4, 1], offset: 4>>) {
  ^bb0(%x: f32, %o: f32):
    linalg.yield %x : f32
  }
  return %pad, %mid : memref<7x4xf32>, memref<8x4xf32>
}

// -----

// Integer zeros too (one zero i64 buffer copied into each layer's routing counts).
#id = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @integer_zeros(
// CHECK: %[[ZEROS:.*]] = memref.alloc() : memref<4x8xi64>
// CHECK-NEXT: %[[A:.*]] = memref.alloc() : memref<4x8xi64>
// CHECK-NEXT: %[[Z:.*]] = arith.constant 0 : i64
// CHECK-NEXT: linalg.generic {{.*}} outs(%[[A]] : memref<4x8xi64>) {
// CHECK-NEXT: ^bb0(%{{.*}}: i64):
// CHECK-NEXT: linalg.yield %[[Z]] : i64
// CHECK-NOT: ins(%[[ZEROS]] :
// CHECK: return
func.func @integer_zeros(%src: memref<4x8xi64>, %out: memref<4x8xi64>) {
  %z = arith.constant 0 : i64
  %zeros = memref.alloc() : memref<4x8xi64>
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]} outs(%zeros : memref<4x8xi64>) {
  ^bb0(%o: i64):
    linalg.yield %z : i64
  }
  %a = memref.alloc() : memref<4x8xi64>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%zeros : memref<4x8xi64>) outs(%a : memref<4x8xi64>) {
  ^bb0(%i: i64, %o: i64):
    linalg.yield %i : i64
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%src : memref<4x8xi64>) outs(%a : memref<4x8xi64>) {
  ^bb0(%i: i64, %o: i64):
    %s = arith.addi %i, %o : i64
    linalg.yield %s : i64
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : memref<4x8xi64>) outs(%out : memref<4x8xi64>) {
  ^bb0(%i: i64, %o: i64):
    linalg.yield %i : i64
  }
  return
}
