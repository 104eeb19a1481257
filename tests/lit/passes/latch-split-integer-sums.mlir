// RUN: latch-opt %s --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops), latch-register-accumulators, latch-split-integer-sums)' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops), latch-register-accumulators, latch-split-integer-sums{chains=1})' | FileCheck %s --check-prefix=OFF
// The first product of a blocked integer cumsum with its one-hot compare fused in (TinyMoE's
// routing rank): a thread's 64-term i64 sum runs 16 trips carrying four partial sums (the
// first from the output's value, the others from 0), each trip the terms of four
// consecutive iterations, combined after the loop.  chains=1 leaves the one chain.
// CHECK-LABEL: func.func @rank(
// CHECK: %[[INIT:.*]] = memref.load %arg3
// CHECK: %[[ZERO:.*]] = arith.constant 0 : i64
// CHECK: %[[R:.*]]:4 = scf.for %[[J:.*]] = %{{.*}} to %c16{{.*}} step %{{.*}} iter_args(%[[A0:.*]] = %[[INIT]], %[[A1:.*]] = %[[ZERO]], %[[A2:.*]] = %[[ZERO]], %[[A3:.*]] = %[[ZERO]]) -> (i64, i64, i64, i64)
// CHECK: arith.addi %[[A0]],
// CHECK: arith.addi %[[A1]],
// CHECK: arith.addi %[[A2]],
// CHECK: arith.addi %[[A3]],
// CHECK: scf.yield
// CHECK: %[[S1:.*]] = arith.addi %[[R]]#0, %[[R]]#1 : i64
// CHECK: %[[S2:.*]] = arith.addi %[[S1]], %[[R]]#2 : i64
// CHECK: %[[S3:.*]] = arith.addi %[[S2]], %[[R]]#3 : i64
// CHECK: memref.store %[[S3]], %arg3
// OFF-LABEL: func.func @rank(
// OFF: scf.for {{.*}} -> (i64)
// OFF-NOT: -> (i64, i64
#tri = affine_map<(c, i, e, j) -> (c, j)>
#b = affine_map<(c, i, e, j) -> (i, j)>
#k = affine_map<(c, i, e, j) -> (e)>
#o = affine_map<(c, i, e, j) -> (c, i, e)>
func.func @rank(%tri: memref<64x64xi64>, %b: memref<16x64xi64>, %key: memref<8xi64>, %out: memref<64x16x8xi64>) {
  linalg.generic {indexing_maps = [#tri, #b, #k, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%tri, %b, %key : memref<64x64xi64>, memref<16x64xi64>, memref<8xi64>) outs(%out : memref<64x16x8xi64>) {
  ^bb0(%t: i64, %x: i64, %y: i64, %acc: i64):
    %eq = arith.cmpi eq, %x, %y : i64
    %z = arith.extui %eq : i1 to i64
    %p = arith.muli %t, %z : i64
    %s = arith.addi %acc, %p : i64
    linalg.yield %s : i64
  }
  return
}
