// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-attention-views)' | FileCheck %s
// Attention reads the heads of a fused q/k/v projection and writes the gradients into its
// gradient as strided [B, H, L, E] views (memref.reinterpret_cast of the projection's
// buffers) instead of through transposed copies.

#split = affine_map<(d0, d1, d2, d3) -> (d0, d2, d1, d3)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// Forward: q, k, v are copies of [1, 64, 2, 16] views of the [1, 64, 96] projection.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[P:.*]]: memref<1x64x96xbf16>
// CHECK-NOT: linalg.generic
// CHECK-DAG: %[[Q:.*]] = memref.reinterpret_cast %[[P]] to offset: [0], sizes: [1, 2, 64, 16], strides: [6144, 16, 96, 1]
// CHECK-DAG: %[[K:.*]] = memref.reinterpret_cast %[[P]] to offset: [32], sizes: [1, 2, 64, 16], strides: [6144, 16, 96, 1]
// CHECK-DAG: %[[V:.*]] = memref.reinterpret_cast %[[P]] to offset: [64], sizes: [1, 2, 64, 16], strides: [6144, 16, 96, 1]
// CHECK: "latch.attention"(%[[Q]], %[[K]], %[[V]],
func.func @forward(%p: memref<1x64x96xbf16>, %o: memref<1x2x64x16xbf16>, %lse: memref<1x2x64xf32>) {
  %s0 = memref.subview %p[0, 0, 0] [1, 64, 32] [1, 1, 1] : memref<1x64x96xbf16> to memref<1x64x32xbf16, strided<[6144, 96, 1]>>
  %s1 = memref.subview %p[0, 0, 32] [1, 64, 32] [1, 1, 1] : memref<1x64x96xbf16> to memref<1x64x32xbf16, strided<[6144, 96, 1], offset: 32>>
  %s2 = memref.subview %p[0, 0, 64] [1, 64, 32] [1, 1, 1] : memref<1x64x96xbf16> to memref<1x64x32xbf16, strided<[6144, 96, 1], offset: 64>>
  %e0 = memref.expand_shape %s0 [[0], [1], [2, 3]] output_shape [1, 64, 2, 16] : memref<1x64x32xbf16, strided<[6144, 96, 1]>> into memref<1x64x2x16xbf16, strided<[6144, 96, 16, 1]>>
  %e1 = memref.expand_shape %s1 [[0], [1], [2, 3]] output_shape [1, 64, 2, 16] : memref<1x64x32xbf16, strided<[6144, 96, 1], offset: 32>> into memref<1x64x2x16xbf16, strided<[6144, 96, 16, 1], offset: 32>>
  %e2 = memref.expand_shape %s2 [[0], [1], [2, 3]] output_shape [1, 64, 2, 16] : memref<1x64x32xbf16, strided<[6144, 96, 1], offset: 64>> into memref<1x64x2x16xbf16, strided<[6144, 96, 16, 1], offset: 64>>
  %q = memref.alloc() : memref<1x2x64x16xbf16>
  linalg.generic {indexing_maps = [#split, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%e0 : memref<1x64x2x16xbf16, strided<[6144, 96, 16, 1]>>) outs(%q : memref<1x2x64x16xbf16>) {
  ^bb0(%x: bf16, %y: bf16):
    linalg.yield %x : bf16
  }
  %k = memref.alloc() : memref<1x2x64x16xbf16>
  linalg.generic {indexing_maps = [#split, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%e1 : memref<1x64x2x16xbf16, strided<[6144, 96, 16, 1], offset: 32>>) outs(%k : memref<1x2x64x16xbf16>) {
  ^bb0(%x: bf16, %y: bf16):
    linalg.yield %x : bf16
  }
  %v = memref.alloc() : memref<1x2x64x16xbf16>
  linalg.generic {indexing_maps = [#split, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%e2 : memref<1x64x2x16xbf16, strided<[6144, 96, 16, 1], offset: 64>>) outs(%v : memref<1x2x64x16xbf16>) {
  ^bb0(%x: bf16, %y: bf16):
    linalg.yield %x : bf16
  }
  "latch.attention"(%q, %k, %v, %o, %lse) {causal = true, scale = 2.500000e-01 : f64} : (memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x64xf32>) -> ()
  return
}

// -----
// The projection is written between the copy and the attention: the copy stays.
#split = affine_map<(d0, d1, d2, d3) -> (d0, d2, d1, d3)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-LABEL: func.func @overwritten(
// CHECK: linalg.generic
// CHECK-NOT: memref.reinterpret_cast
// CHECK: "latch.attention"(%alloc, %arg1, %arg1,
func.func @overwritten(%p: memref<1x64x96xbf16>, %x: memref<1x2x64x16xbf16>, %o: memref<1x2x64x16xbf16>, %lse: memref<1x2x64xf32>) {
  %s0 = memref.subview %p[0, 0, 0] [1, 64, 32] [1, 1, 1] : memref<1x64x96xbf16> to memref<1x64x32xbf16, strided<[6144, 96, 1]>>
  %e0 = memref.expand_shape %s0 [[0], [1], [2, 3]] output_shape [1, 64, 2, 16] : memref<1x64x32xbf16, strided<[6144, 96, 1]>> into memref<1x64x2x16xbf16, strided<[6144, 96, 16, 1]>>
  %q = memref.alloc() : memref<1x2x64x16xbf16>
  linalg.generic {indexing_maps = [#split, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%e0 : memref<1x64x2x16xbf16, strided<[6144, 96, 16, 1]>>) outs(%q : memref<1x2x64x16xbf16>) {
  ^bb0(%a: bf16, %b: bf16):
    linalg.yield %a : bf16
  }
  %z = arith.constant 0.0 : bf16
  linalg.fill ins(%z : bf16) outs(%p : memref<1x64x96xbf16>)
  "latch.attention"(%q, %x, %x, %o, %lse) {causal = true, scale = 2.500000e-01 : f64} : (memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x64xf32>) -> ()
  return
}

// -----
// Backward: dQ, dK, dV are copied transposed into [1, 64, 2, 16] buffers, which are put
// side by side (memref.copy) in the projection's gradient: the attention writes its parts.
#split = affine_map<(d0, d1, d2, d3) -> (d0, d2, d1, d3)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-LABEL: func.func @gradients(
// CHECK: %[[G:.*]] = memref.alloc() : memref<1x64x96xbf16>
// CHECK-DAG: %[[DQ:.*]] = memref.reinterpret_cast %[[G]] to offset: [0], sizes: [1, 2, 64, 16], strides: [6144, 16, 96, 1]
// CHECK-DAG: %[[DK:.*]] = memref.reinterpret_cast %[[G]] to offset: [32], sizes: [1, 2, 64, 16], strides: [6144, 16, 96, 1]
// CHECK-DAG: %[[DV:.*]] = memref.reinterpret_cast %[[G]] to offset: [64], sizes: [1, 2, 64, 16], strides: [6144, 16, 96, 1]
// CHECK: "latch.attention_grad"({{.*}}, %[[DQ]], %[[DK]], %[[DV]])
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.copy %{{.*}}, %{{.*}} : memref<1x64x32xbf16>
// CHECK: memref.copy %[[G]], %arg6
func.func @gradients(%q: memref<1x2x64x16xbf16>, %lse: memref<1x2x64xf32>, %do: memref<1x2x64x16xbf16>, %delta: memref<1x2x64xf32>, %a: memref<1x2x64x16xbf16>, %b: memref<1x2x64x16xbf16>, %out: memref<1x64x96xbf16>) {
  %dq = memref.alloc() : memref<1x2x64x16xbf16>
  %dk = memref.alloc() : memref<1x2x64x16xbf16>
  %dv = memref.alloc() : memref<1x2x64x16xbf16>
  "latch.attention_grad"(%q, %a, %b, %lse, %do, %delta, %dq, %dk, %dv) {causal = true, scale = 2.500000e-01 : f64} : (memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x64xf32>, memref<1x2x64x16xbf16>, memref<1x2x64xf32>, memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>) -> ()
  %tq = memref.alloc() : memref<1x64x2x16xbf16>
  linalg.generic {indexing_maps = [#split, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%dq : memref<1x2x64x16xbf16>) outs(%tq : memref<1x64x2x16xbf16>) {
  ^bb0(%x: bf16, %y: bf16):
    linalg.yield %x : bf16
  }
  %tk = memref.alloc() : memref<1x64x2x16xbf16>
  linalg.generic {indexing_maps = [#split, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%dk : memref<1x2x64x16xbf16>) outs(%tk : memref<1x64x2x16xbf16>) {
  ^bb0(%x: bf16, %y: bf16):
    linalg.yield %x : bf16
  }
  %tv = memref.alloc() : memref<1x64x2x16xbf16>
  linalg.generic {indexing_maps = [#split, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%dv : memref<1x2x64x16xbf16>) outs(%tv : memref<1x64x2x16xbf16>) {
  ^bb0(%x: bf16, %y: bf16):
    linalg.yield %x : bf16
  }
  %cq = memref.collapse_shape %tq [[0], [1], [2, 3]] : memref<1x64x2x16xbf16> into memref<1x64x32xbf16>
  %ck = memref.collapse_shape %tk [[0], [1], [2, 3]] : memref<1x64x2x16xbf16> into memref<1x64x32xbf16>
  %cv = memref.collapse_shape %tv [[0], [1], [2, 3]] : memref<1x64x2x16xbf16> into memref<1x64x32xbf16>
  %g = memref.alloc() : memref<1x64x96xbf16>
  %g0 = memref.subview %g[0, 0, 0] [1, 64, 32] [1, 1, 1] : memref<1x64x96xbf16> to memref<1x64x32xbf16, strided<[6144, 96, 1]>>
  memref.copy %cq, %g0 : memref<1x64x32xbf16> to memref<1x64x32xbf16, strided<[6144, 96, 1]>>
  %g1 = memref.subview %g[0, 0, 32] [1, 64, 32] [1, 1, 1] : memref<1x64x96xbf16> to memref<1x64x32xbf16, strided<[6144, 96, 1], offset: 32>>
  memref.copy %ck, %g1 : memref<1x64x32xbf16> to memref<1x64x32xbf16, strided<[6144, 96, 1], offset: 32>>
  %g2 = memref.subview %g[0, 0, 64] [1, 64, 32] [1, 1, 1] : memref<1x64x96xbf16> to memref<1x64x32xbf16, strided<[6144, 96, 1], offset: 64>>
  memref.copy %cv, %g2 : memref<1x64x32xbf16> to memref<1x64x32xbf16, strided<[6144, 96, 1], offset: 64>>
  memref.copy %g, %out : memref<1x64x96xbf16> to memref<1x64x96xbf16>
  return
}
