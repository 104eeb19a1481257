// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-specialize-every, canonicalize)' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-specialize-every{max-variants=1})' | FileCheck %s --check-prefix=LIMIT
//
// An every(4) inner rule (as latch-lower-control leaves it): the counter state %count is
// read, incremented, and the scf.if updates %w only when the new count is a multiple of 4.
// Each variant replaces the condition by its outcome: v0 (no step) returns %w untouched and
// has no trace of the update; v1 always updates.  latch.when says when each applies.
// CHECK-LABEL: func.func @update__v0(
// CHECK-SAME: %[[W:[^:]+]]: tensor<8xf32>, %{{[^:]+}}: tensor<i64>, %[[G:[^:]+]]: tensor<8xf32>)
// CHECK-SAME: attributes {latch.when = [{offset = 1 : i64, period = 4 : i64, state = 1 : i64, value = false}]}
// CHECK-NOT: scf.if
// CHECK-NOT: arith.subf
// CHECK: return %[[W]], %{{.+}} : tensor<8xf32>, tensor<i64>
// CHECK-LABEL: func.func @update__v1(
// CHECK-SAME: attributes {latch.when = [{offset = 1 : i64, period = 4 : i64, state = 1 : i64, value = true}]}
// CHECK-NOT: scf.if
// CHECK: arith.subf
// CHECK-NOT: func.func @update(
//
// With fewer variants allowed than outcomes, the function is left as it is.
// LIMIT-LABEL: func.func @update(
// LIMIT: scf.if
#id = affine_map<(d0) -> (d0)>
func.func @update(%w: tensor<8xf32>, %count: tensor<i64>, %g: tensor<8xf32>) -> (tensor<8xf32>, tensor<i64>) {
  %c = tensor.extract %count[] : tensor<i64>
  %one = arith.constant 1 : i64
  %four = arith.constant 4 : i64
  %zero = arith.constant 0 : i64
  %n = arith.addi %c, %one : i64
  %r = arith.remsi %n, %four : i64
  %now = arith.cmpi eq, %r, %zero : i64
  %new = scf.if %now -> (tensor<8xf32>) {
    %e = tensor.empty() : tensor<8xf32>
    %s = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]} ins(%w, %g : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.subf %a, %b : f32
      linalg.yield %d : f32
    } -> tensor<8xf32>
    scf.yield %s : tensor<8xf32>
  } else {
    scf.yield %w : tensor<8xf32>
  }
  %nt = tensor.from_elements %n : tensor<i64>
  return %new, %nt : tensor<8xf32>, tensor<i64>
}
