// RUN: latch-opt %s --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops), latch-register-accumulators, latch-fold-zero-fills)' | FileCheck %s
// A zero fill read only as the next reduction's initial values goes, and each thread's sum
// starts from the constant (integer and float; the reduction's loops in another order than
// the fill's).  Kept: a fill read by something else first, a reduction over part of the
// buffer, a fill of ones.
// CHECK-LABEL: func.func @counts(
// CHECK: %[[BUF:.*]] = memref.alloc() : memref<4x8xi64>
// CHECK-NOT: memref.store %c0_i64
// CHECK: scf.parallel
// CHECK: %[[Z:.*]] = arith.constant 0 : i64
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %[[Z]]) -> (i64)
// CHECK: memref.store %{{.*}}, %[[BUF]]
// CHECK: memref.copy %[[BUF]], %arg1
#x = affine_map<(e, t, j) -> (t, j)>
#o = affine_map<(e, t, j) -> (t, e)>
#id = affine_map<(t, e) -> (t, e)>
func.func @counts(%x: memref<4x16xi64>, %out: memref<4x8xi64>) {
  %zero = arith.constant 0 : i64
  %buf = memref.alloc() : memref<4x8xi64>
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]} outs(%buf : memref<4x8xi64>) {
  ^bb0(%o: i64):
    linalg.yield %zero : i64
  }
  linalg.generic {indexing_maps = [#x, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : memref<4x16xi64>) outs(%buf : memref<4x8xi64>) {
  ^bb0(%v: i64, %acc: i64):
    %e = linalg.index 0 : index
    %ei = arith.index_cast %e : index to i64
    %eq = arith.cmpi eq, %v, %ei : i64
    %one = arith.extui %eq : i1 to i64
    %s = arith.addi %acc, %one : i64
    linalg.yield %s : i64
  }
  memref.copy %buf, %out : memref<4x8xi64> to memref<4x8xi64>
  return
}

// CHECK-LABEL: func.func @sums(
// CHECK: memref.alloc() : memref<32xf32>
// CHECK-NOT: memref.store %cst
// CHECK: scf.parallel
// CHECK: %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %[[Z]]) -> (f32)
#r = affine_map<(i, j) -> (i, j)>
#s = affine_map<(i, j) -> (i)>
#i1 = affine_map<(i) -> (i)>
func.func @sums(%x: memref<32x8xf32>, %out: memref<32xf32>) {
  %zero = arith.constant 0.0 : f32
  %buf = memref.alloc() : memref<32xf32>
  linalg.generic {indexing_maps = [#i1], iterator_types = ["parallel"]} outs(%buf : memref<32xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#r, #s], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<32x8xf32>) outs(%buf : memref<32xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %a = arith.addf %acc, %v : f32
    linalg.yield %a : f32
  }
  memref.copy %buf, %out : memref<32xf32> to memref<32xf32>
  return
}

// The fill writes the allocation, the reduction a reshape of all of it: folded too.
// CHECK-LABEL: func.func @through_a_reshape(
// CHECK: memref.alloc() : memref<32xi64>
// CHECK-NOT: memref.store %c0_i64
// CHECK: scf.parallel
// CHECK: %[[Z:.*]] = arith.constant 0 : i64
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %[[Z]]) -> (i64)
func.func @through_a_reshape(%x: memref<4x16xi64>, %out: memref<32xi64>) {
  %zero = arith.constant 0 : i64
  %flat = memref.alloc() : memref<32xi64>
  linalg.generic {indexing_maps = [#i1], iterator_types = ["parallel"]} outs(%flat : memref<32xi64>) {
  ^bb0(%o: i64):
    linalg.yield %zero : i64
  }
  %buf = memref.expand_shape %flat [[0, 1]] output_shape [4, 8] : memref<32xi64> into memref<4x8xi64>
  linalg.generic {indexing_maps = [#x, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : memref<4x16xi64>) outs(%buf : memref<4x8xi64>) {
  ^bb0(%v: i64, %acc: i64):
    %s = arith.addi %acc, %v : i64
    linalg.yield %s : i64
  }
  memref.copy %flat, %out : memref<32xi64> to memref<32xi64>
  return
}

// CHECK-LABEL: func.func @kept(
// CHECK: memref.store %c0_i64, %[[A:.*]][
// CHECK: memref.copy %[[A]], %arg2
// CHECK: memref.load %[[A]]
// CHECK: iter_args(%{{.*}} = %0)
// CHECK: memref.store %c0_i64, %[[B:.*]][
// CHECK: iter_args(%{{.*}} = %0)
// CHECK: memref.store %c1_i64, %[[C:.*]][
// CHECK: memref.load %[[C]]
// CHECK: iter_args(%{{.*}} = %0)
func.func @kept(%x: memref<4x16xi64>, %out: memref<4x8xi64>, %peek: memref<4x8xi64>) {
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  // read by a copy before the reduction
  %a = memref.alloc() : memref<4x8xi64>
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]} outs(%a : memref<4x8xi64>) {
  ^bb0(%o: i64):
    linalg.yield %zero : i64
  }
  memref.copy %a, %peek : memref<4x8xi64> to memref<4x8xi64>
  linalg.generic {indexing_maps = [#x, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : memref<4x16xi64>) outs(%a : memref<4x8xi64>) {
  ^bb0(%v: i64, %acc: i64):
    %s = arith.addi %acc, %v : i64
    linalg.yield %s : i64
  }
  memref.copy %a, %out : memref<4x8xi64> to memref<4x8xi64>
  // the reduction writes half of the buffer
  %b = memref.alloc() : memref<4x8xi64>
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]} outs(%b : memref<4x8xi64>) {
  ^bb0(%o: i64):
    linalg.yield %zero : i64
  }
  %top = memref.subview %b[0, 0] [2, 8] [1, 1] : memref<4x8xi64> to memref<2x8xi64, strided<[8, 1]>>
  %xh = memref.subview %x[0, 0] [2, 16] [1, 1] : memref<4x16xi64> to memref<2x16xi64, strided<[16, 1]>>
  linalg.generic {indexing_maps = [#x, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%xh : memref<2x16xi64, strided<[16, 1]>>) outs(%top : memref<2x8xi64, strided<[8, 1]>>) {
  ^bb0(%v: i64, %acc: i64):
    %s = arith.addi %acc, %v : i64
    linalg.yield %s : i64
  }
  memref.copy %b, %out : memref<4x8xi64> to memref<4x8xi64>
  // ones
  %c = memref.alloc() : memref<4x8xi64>
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]} outs(%c : memref<4x8xi64>) {
  ^bb0(%o: i64):
    linalg.yield %one : i64
  }
  linalg.generic {indexing_maps = [#x, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : memref<4x16xi64>) outs(%c : memref<4x8xi64>) {
  ^bb0(%v: i64, %acc: i64):
    %s = arith.addi %acc, %v : i64
    linalg.yield %s : i64
  }
  memref.copy %c, %out : memref<4x8xi64> to memref<4x8xi64>
  return
}
