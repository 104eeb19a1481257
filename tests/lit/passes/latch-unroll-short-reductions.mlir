// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-unroll-short-reductions, func.func(linalg-fuse-elementwise-ops))' | FileCheck %s
// The MoE's top-2 combine y[t, :] = sum_k o[t, k, :] * w[t, k] into zeros, read only by the
// residual sum x + y: the sum over k is unrolled (k = 0, then k = 1, the accumulator chained
// from the fill's 0.0), and the residual sum computes it: one generic, no materialized y,
// no fill.
// A sum of 16 terms (more than max-terms = 8) stays a reduction; so does a short sum with
// two readers.

#in3 = affine_map<(t, k, d) -> (t, k, d)>
#w2 = affine_map<(t, k, d) -> (t, k)>
#o2 = affine_map<(t, k, d) -> (t, d)>
#id = affine_map<(t, d) -> (t, d)>
// CHECK-LABEL: func.func @combine(
// CHECK-SAME: %[[X:.*]]: tensor<64x32xf32>, %[[O:.*]]: tensor<64x2x32xbf16>, %[[W:.*]]: tensor<64x2xf32>
// CHECK-DAG: %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[R:.*]] = linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "parallel"]
// CHECK-SAME: ins(%[[X]], %[[O]], %[[O]], %[[W]], %[[W]] :
// CHECK: ^bb0(%[[XI:.*]]: f32, %[[O0:.*]]: bf16, %[[O1:.*]]: bf16, %[[W0:.*]]: f32, %[[W1:.*]]: f32, %{{.*}}: f32):
// CHECK: %[[E0:.*]] = arith.extf %[[O0]]
// CHECK: %[[P0:.*]] = arith.mulf %[[E0]], %[[W0]]
// CHECK: %[[S0:.*]] = arith.addf %[[P0]], %[[Z]]
// CHECK: %[[E1:.*]] = arith.extf %[[O1]]
// CHECK: %[[P1:.*]] = arith.mulf %[[E1]], %[[W1]]
// CHECK: %[[S1:.*]] = arith.addf %[[P1]], %[[S0]]
// CHECK: %[[Y:.*]] = arith.addf %[[XI]], %[[S1]]
// CHECK: linalg.yield %[[Y]]
// CHECK-NOT: linalg.generic
// CHECK: return %[[R]]
func.func @combine(%x: tensor<64x32xf32>, %o: tensor<64x2x32xbf16>, %w: tensor<64x2xf32>) -> tensor<64x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x32xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<64x32xf32>) -> tensor<64x32xf32>
  %y = linalg.generic {indexing_maps = [#in3, #w2, #o2], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%o, %w : tensor<64x2x32xbf16>, tensor<64x2xf32>) outs(%z : tensor<64x32xf32>) {
  ^bb0(%a: bf16, %b: f32, %acc: f32):
    %ae = arith.extf %a : bf16 to f32
    %p = arith.mulf %ae, %b : f32
    %s = arith.addf %p, %acc : f32
    linalg.yield %s : f32
  } -> tensor<64x32xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %y : tensor<64x32xf32>, tensor<64x32xf32>) outs(%e : tensor<64x32xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<64x32xf32>
  return %r : tensor<64x32xf32>
}

// -----

#in3 = affine_map<(t, k, d) -> (t, k, d)>
#o2 = affine_map<(t, k, d) -> (t, d)>
#id = affine_map<(t, d) -> (t, d)>
// CHECK-LABEL: func.func @long_sum(
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "reduction", "parallel"]
func.func @long_sum(%x: tensor<64x32xf32>, %o: tensor<64x16x32xf32>, %init: tensor<64x32xf32>) -> tensor<64x32xf32> {
  %y = linalg.generic {indexing_maps = [#in3, #o2], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%o : tensor<64x16x32xf32>) outs(%init : tensor<64x32xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %a, %acc : f32
    linalg.yield %s : f32
  } -> tensor<64x32xf32>
  %e = tensor.empty() : tensor<64x32xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %y : tensor<64x32xf32>, tensor<64x32xf32>) outs(%e : tensor<64x32xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<64x32xf32>
  return %r : tensor<64x32xf32>
}

// -----

#in3 = affine_map<(t, k, d) -> (t, k, d)>
#o2 = affine_map<(t, k, d) -> (t, d)>
#id = affine_map<(t, d) -> (t, d)>
// CHECK-LABEL: func.func @two_readers(
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "reduction", "parallel"]
func.func @two_readers(%x: tensor<64x32xf32>, %o: tensor<64x2x32xf32>, %init: tensor<64x32xf32>) -> (tensor<64x32xf32>, tensor<64x32xf32>) {
  %y = linalg.generic {indexing_maps = [#in3, #o2], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%o : tensor<64x2x32xf32>) outs(%init : tensor<64x32xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %a, %acc : f32
    linalg.yield %s : f32
  } -> tensor<64x32xf32>
  %e = tensor.empty() : tensor<64x32xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %y : tensor<64x32xf32>, tensor<64x32xf32>) outs(%e : tensor<64x32xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<64x32xf32>
  return %r, %y : tensor<64x32xf32>, tensor<64x32xf32>
}
