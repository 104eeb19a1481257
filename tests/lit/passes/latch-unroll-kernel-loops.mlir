// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-unroll-kernel-loops, canonicalize)' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-unroll-kernel-loops{max-trips=2})' | FileCheck %s --check-prefix=LIMIT
//
// A shared-weight block applied 3 times (latch.repeat lowers to this scf.for): the loop
// becomes three copies of its body, each reading the previous one's result, with the
// induction variable a constant (here it picks the slice of %w to add).
// CHECK-LABEL: func.func @repeat(
// CHECK-NOT: scf.for
// CHECK: %[[S0:.+]] = tensor.extract_slice %arg1[0, 0] [1, 4]
// CHECK: %[[A0:.+]] = linalg.generic {{.*}} ins(%arg0, %[[S0]]
// CHECK: %[[S1:.+]] = tensor.extract_slice %arg1[1, 0] [1, 4]
// CHECK: %[[A1:.+]] = linalg.generic {{.*}} ins(%[[A0]], %[[S1]]
// CHECK: %[[S2:.+]] = tensor.extract_slice %arg1[2, 0] [1, 4]
// CHECK: %[[A2:.+]] = linalg.generic {{.*}} ins(%[[A1]], %[[S2]]
// CHECK: return %[[A2]]
//
// A loop without parallel work stays; so does one longer than max-trips.
// CHECK-LABEL: func.func @scalar_loop(
// CHECK: scf.for
// LIMIT-LABEL: func.func @repeat(
// LIMIT: scf.for
#id = affine_map<(d0) -> (d0)>
func.func @repeat(%x: tensor<4xf32>, %w: tensor<3x4xf32>) -> tensor<4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%h = %x) -> (tensor<4xf32>) {
    %s = tensor.extract_slice %w[%i, 0] [1, 4] [1, 1] : tensor<3x4xf32> to tensor<4xf32>
    %e = tensor.empty() : tensor<4xf32>
    %n = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]} ins(%h, %s : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %t = arith.addf %a, %b : f32
      %u = math.tanh %t : f32
      linalg.yield %u : f32
    } -> tensor<4xf32>
    scf.yield %n : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

func.func @scalar_loop(%x: i64) -> i64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%a = %x) -> (i64) {
    %b = arith.addi %a, %a : i64
    scf.yield %b : i64
  }
  return %r : i64
}
