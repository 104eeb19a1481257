// RUN: latch-opt %s --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops), latch-register-accumulators, latch-fuse-element-readers)' | FileCheck %s
// A thread-per-element reduction (a count over the experts, [4, 8]) read element for element
// through a reshape ([32]) by the next op: that op's body runs in the reduction's threads,
// at the flattened position of the thread's element, reading the value just stored.  Kept
// apart: a reader at another element, a reader writing what the first loop reads, a reader
// of a second buffer the first loop writes.
// CHECK-LABEL: func.func @rank(
// CHECK: scf.parallel (%[[I:.*]], %[[J:.*]]) =
// CHECK: %[[SUM:.*]] = scf.for
// CHECK: memref.store %[[SUM]], %[[R:.*]][%[[I]], %[[J]]] : memref<4x8xi64>
// CHECK: %[[ROW:.*]] = arith.muli %[[I]], %{{.*}} : index
// CHECK: %[[POS:.*]] = arith.addi %[[ROW]], %[[J]] : index
// CHECK-NOT: memref.load %collapse_shape
// CHECK: arith.cmpi slt, %[[SUM]],
// CHECK: memref.store %{{.*}}, %arg2[%[[POS]]] : memref<32xi64>
// CHECK-NEXT: scf.reduce
// CHECK-NOT: scf.parallel
// CHECK: return
#x = affine_map<(t, e, j) -> (t, j)>
#o = affine_map<(t, e, j) -> (t, e)>
#v = affine_map<(i) -> (i)>
func.func @rank(%x: memref<4x16xi64>, %e: memref<32xi64>, %slot: memref<32xi64>) {
  %c5 = arith.constant 5 : i64
  %c8 = arith.constant 8 : i64
  %r = memref.alloc() : memref<4x8xi64>
  linalg.generic {indexing_maps = [#x, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : memref<4x16xi64>) outs(%r : memref<4x8xi64>) {
  ^bb0(%a: i64, %acc: i64):
    %s = arith.addi %acc, %a : i64
    linalg.yield %s : i64
  }
  %flat = memref.collapse_shape %r [[0, 1]] : memref<4x8xi64> into memref<32xi64>
  linalg.generic {indexing_maps = [#v, #v, #v], iterator_types = ["parallel"]}
      ins(%flat, %e : memref<32xi64>, memref<32xi64>) outs(%slot : memref<32xi64>) {
  ^bb0(%k: i64, %ex: i64, %o: i64):
    %keep = arith.cmpi slt, %k, %c5 : i64
    %base = arith.muli %ex, %c8 : i64
    %at = arith.addi %base, %k : i64
    %s = arith.select %keep, %at, %c5 : i64
    linalg.yield %s : i64
  }
  return
}

// CHECK-LABEL: func.func @kept(
// CHECK-COUNT-6: scf.parallel
// CHECK-NOT: scf.parallel
#t = affine_map<(i, j) -> (j, i)>
#id = affine_map<(i, j) -> (i, j)>
func.func @kept(%x: memref<4x16xi64>, %y: memref<32xi64>, %z: memref<4x8xi64>, %w: memref<8x4xi64>) {
  %r = memref.alloc() : memref<4x8xi64>
  linalg.generic {indexing_maps = [#x, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : memref<4x16xi64>) outs(%r : memref<4x8xi64>) {
  ^bb0(%a: i64, %acc: i64):
    %s = arith.addi %acc, %a : i64
    linalg.yield %s : i64
  }
  // what the reduction stored, transposed: another thread's element
  linalg.generic {indexing_maps = [#t, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r : memref<4x8xi64>) outs(%w : memref<8x4xi64>) {
  ^bb0(%k: i64, %o: i64):
    linalg.yield %k : i64
  }
  %r2 = memref.alloc() : memref<4x8xi64>
  linalg.generic {indexing_maps = [#x, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : memref<4x16xi64>) outs(%r2 : memref<4x8xi64>) {
  ^bb0(%a: i64, %acc: i64):
    %s = arith.addi %acc, %a : i64
    linalg.yield %s : i64
  }
  // writes what the reduction reads
  %flat2 = memref.collapse_shape %r2 [[0, 1]] : memref<4x8xi64> into memref<32xi64>
  %xf = memref.collapse_shape %x [[0, 1]] : memref<4x16xi64> into memref<64xi64>
  %xs = memref.subview %xf[0] [32] [1] : memref<64xi64> to memref<32xi64, strided<[1]>>
  linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]}
      ins(%flat2 : memref<32xi64>) outs(%xs : memref<32xi64, strided<[1]>>) {
  ^bb0(%k: i64, %o: i64):
    linalg.yield %k : i64
  }
  %r3 = memref.alloc() : memref<4x8xi64>
  linalg.generic {indexing_maps = [#x, #o, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : memref<4x16xi64>) outs(%r3, %z : memref<4x8xi64>, memref<4x8xi64>) {
  ^bb0(%a: i64, %acc: i64, %acc2: i64):
    %s = arith.addi %acc, %a : i64
    %s2 = arith.addi %acc2, %a : i64
    linalg.yield %s, %s2 : i64, i64
  }
  // reads a second output of the reduction
  %flat3 = memref.collapse_shape %r3 [[0, 1]] : memref<4x8xi64> into memref<32xi64>
  %zf = memref.collapse_shape %z [[0, 1]] : memref<4x8xi64> into memref<32xi64>
  linalg.generic {indexing_maps = [#v, #v, #v], iterator_types = ["parallel"]}
      ins(%flat3, %zf : memref<32xi64>, memref<32xi64>) outs(%y : memref<32xi64>) {
  ^bb0(%k: i64, %k2: i64, %o: i64):
    %s = arith.addi %k, %k2 : i64
    linalg.yield %s : i64
  }
  return
}

// Row readers: a thread-per-element sum of partials ([4, 8], its loops (e, t)) read a row
// at a time by the next op (a row maximum, one thread a row): the sum's iterations of a
// row run first in the reader's thread, a loop over the other index, then the reader's
// own loop reads what the thread just stored.
// CHECK-LABEL: func.func @router(
// CHECK: scf.parallel (%[[T:.*]]) =
// CHECK-NEXT: scf.for %[[E:[a-z0-9]*]] = 
// CHECK: scf.for
// CHECK: memref.load %arg0[%{{.*}}, %[[T]], %[[E]]] : memref<3x4x8xf32>
// CHECK: memref.store %{{.*}}, %[[B:.*]][%[[T]], %[[E]]] : memref<4x8xf32>
// CHECK: scf.for %[[F:[a-z0-9]*]] =
// CHECK: memref.load %[[B]][%[[T]], %[[F]]] : memref<4x8xf32>
// CHECK: memref.store %{{.*}}, %arg1[%[[T]]] : memref<4xf32>
// CHECK-NOT: scf.parallel
// CHECK: return
#p = affine_map<(e, t, s) -> (s, t, e)>
#pb = affine_map<(e, t, s) -> (t, e)>
#row = affine_map<(t, e) -> (t, e)>
#rowout = affine_map<(t, e) -> (t)>
func.func @router(%parts: memref<3x4x8xf32>, %m: memref<4xf32>) {
  %b = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#p, #pb], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%parts : memref<3x4x8xf32>) outs(%b : memref<4x8xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#row, #rowout], iterator_types = ["parallel", "reduction"]}
      ins(%b : memref<4x8xf32>) outs(%m : memref<4xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %x = arith.maximumf %acc, %v : f32
    linalg.yield %x : f32
  }
  return
}

// Kept apart: a row reader reading the row an index buffer names (another thread's).
// CHECK-LABEL: func.func @other_rows(
// CHECK-COUNT-2: scf.parallel
// CHECK-NOT: scf.parallel
#pick = affine_map<(t, e) -> (t)>
func.func @other_rows(%parts: memref<3x4x8xf32>, %perm: memref<4xindex>, %w: memref<4x8xf32>,
                      %m: memref<4xf32>) {
  %b = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#p, #pb], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%parts : memref<3x4x8xf32>) outs(%b : memref<4x8xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#pick, #row, #rowout], iterator_types = ["parallel", "reduction"]}
      ins(%perm, %w : memref<4xindex>, memref<4x8xf32>) outs(%m : memref<4xf32>) {
  ^bb0(%r: index, %u: f32, %acc: f32):
    %e = linalg.index 1 : index
    %v = memref.load %b[%r, %e] : memref<4x8xf32>
    %vu = arith.addf %v, %u : f32
    %x = arith.maximumf %acc, %vu : f32
    linalg.yield %x : f32
  }
  return
}
