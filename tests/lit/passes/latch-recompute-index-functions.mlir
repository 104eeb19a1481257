// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-recompute-index-functions)' | FileCheck %s
// A blocked scan's 0/1 triangle L[b, k] = (b >= k), built from an arange, read by the
// routing rank's product: the product computes (b >= k) from its own loop indices (the
// triangle's writer's output map is transposed: its loop 1 is the buffer's dimension 0).

// CHECK-LABEL: func.func @rank(
// CHECK: linalg.generic {{.*}} outs(%[[TRI:.*]] : memref<8x8xi64>)
// CHECK: linalg.generic {{.*}} ins(%[[TRI]], %arg0, %arg1 : memref<8x8xi64>, memref<5x8xi64>, memref<3xi64>)
// CHECK-NEXT: ^bb0(%{{.*}}: i64, %[[X:.*]]: i64, %[[S:.*]]: i64, %[[ACC:.*]]: i64):
// CHECK-DAG: %[[B:.*]] = linalg.index 2 : index
// CHECK-DAG: %[[K:.*]] = linalg.index 3 : index
// CHECK-DAG: %[[BI:.*]] = arith.index_cast %[[B]] : index to i64
// CHECK-DAG: %[[KI:.*]] = arith.index_cast %[[K]] : index to i64
// CHECK: %[[GE:.*]] = arith.cmpi sge, %[[BI]], %[[KI]] : i64
// CHECK: %[[L:.*]] = arith.extui %[[GE]] : i1 to i64
// CHECK: %[[EQ:.*]] = arith.cmpi eq, %[[X]], %[[S]] : i64
// CHECK: %[[ONE:.*]] = arith.extui %[[EQ]] : i1 to i64
// CHECK: arith.muli %[[L]], %[[ONE]] : i64
#a1 = affine_map<(d0) -> (d0)>
#row = affine_map<(d0, d1) -> (d1)>
#col = affine_map<(d0, d1) -> (d0)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
#l = affine_map<(e, t, b, k) -> (b, k)>
#x = affine_map<(e, t, b, k) -> (t, k)>
#s = affine_map<(e, t, b, k) -> (e)>
#o = affine_map<(e, t, b, k) -> (b, t, e)>
func.func @rank(%x: memref<5x8xi64>, %s: memref<3xi64>, %out: memref<8x5x3xi64>) {
  %ar = memref.alloc() : memref<8xi64>
  linalg.generic {indexing_maps = [#a1], iterator_types = ["parallel"]} outs(%ar : memref<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  }
  %tri = memref.alloc() : memref<8x8xi64>
  linalg.generic {indexing_maps = [#row, #col, #tr], iterator_types = ["parallel", "parallel"]}
      ins(%ar, %ar : memref<8xi64>, memref<8xi64>) outs(%tri : memref<8x8xi64>) {
  ^bb0(%a: i64, %b: i64, %o: i64):
    %ge = arith.cmpi sge, %a, %b : i64
    %v = arith.extui %ge : i1 to i64
    linalg.yield %v : i64
  }
  linalg.generic {indexing_maps = [#l, #x, #s, #o],
                  iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%tri, %x, %s : memref<8x8xi64>, memref<5x8xi64>, memref<3xi64>)
      outs(%out : memref<8x5x3xi64>) {
  ^bb0(%lv: i64, %xv: i64, %sv: i64, %acc: i64):
    %eq = arith.cmpi eq, %xv, %sv : i64
    %one = arith.extui %eq : i1 to i64
    %p = arith.muli %lv, %one : i64
    %r = arith.addi %acc, %p : i64
    linalg.yield %r : i64
  }
  return
}

// -----
// Not index functions: a buffer whose writer reads a function argument, and one written
// again (in part) after the function of indices: both stay loads.

// CHECK-LABEL: func.func @not_index_functions(
// CHECK: linalg.generic {{.*}} ins(%[[Y:.*]] : memref<8xi64>) outs(%arg1
// CHECK-NEXT: ^bb0(%[[V:.*]]: i64, %[[O:.*]]: i64):
// CHECK-NEXT: arith.addi %[[V]], %[[O]]
// CHECK: linalg.generic {{.*}} ins(%[[Z:.*]] : memref<8xi64>) outs(%arg1
// CHECK-NEXT: ^bb0(%[[W:.*]]: i64, %[[P:.*]]: i64):
// CHECK-NEXT: arith.addi %[[W]], %[[P]]
#m = affine_map<(d0) -> (d0)>
func.func @not_index_functions(%a: memref<8xi64>, %out: memref<8xi64>) {
  %y = memref.alloc() : memref<8xi64>
  linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]}
      ins(%a : memref<8xi64>) outs(%y : memref<8xi64>) {
  ^bb0(%v: i64, %o: i64):
    %d = arith.addi %v, %v : i64
    linalg.yield %d : i64
  }
  linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]}
      ins(%y : memref<8xi64>) outs(%out : memref<8xi64>) {
  ^bb0(%v: i64, %o: i64):
    %d = arith.addi %v, %o : i64
    linalg.yield %d : i64
  }
  %z = memref.alloc() : memref<8xi64>
  linalg.generic {indexing_maps = [#m], iterator_types = ["parallel"]} outs(%z : memref<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  }
  %part = memref.subview %z[0] [4] [1] : memref<8xi64> to memref<4xi64, strided<[1]>>
  linalg.generic {indexing_maps = [#m], iterator_types = ["parallel"]} outs(%part : memref<4xi64, strided<[1]>>) {
  ^bb0(%o: i64):
    %c = arith.constant 7 : i64
    linalg.yield %c : i64
  }
  linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]}
      ins(%z : memref<8xi64>) outs(%out : memref<8xi64>) {
  ^bb0(%v: i64, %o: i64):
    %d = arith.addi %v, %o : i64
    linalg.yield %d : i64
  }
  return
}
