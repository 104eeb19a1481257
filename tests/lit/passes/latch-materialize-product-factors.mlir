// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-materialize-product-factors)' | FileCheck %s
// A product whose bf16 factor is computed in its body from wider inputs (elementwise
// fusion moved the SwiGLU of the looped TinyMoE's experts into their second product)
// reads that factor from a bf16 tensor an elementwise generic writes; the product's body
// is then extf * extf + acc, which latch-form-contraction-kernels stages by copies.

#a = affine_map<(b, m, n, k) -> (b, m, k)>
#w = affine_map<(b, m, n, k) -> (b, k, n)>
#o = affine_map<(b, m, n, k) -> (b, m, n)>
// CHECK-DAG: #[[ID3:.*]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-DAG: #[[A:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-LABEL: func.func @swiglu_product(
// CHECK-SAME: %[[X:[^:]*]]: tensor<2x16x32xf32>, %[[Y:[^:]*]]: tensor<2x16x32xf32>, %[[W:[^:]*]]: tensor<2x32x8xbf16>)
// CHECK: %[[E:.*]] = tensor.empty() : tensor<2x16x32xbf16>
// CHECK: %[[H:.*]] = linalg.generic {indexing_maps = [#[[ID3]], #[[ID3]], #[[ID3]]], iterator_types = ["parallel", "parallel", "parallel"]} ins(%[[X]], %[[Y]] : {{.*}}) outs(%[[E]] : tensor<2x16x32xbf16>)
// CHECK: math.exp
// CHECK: %[[SWIGLU:.*]] = arith.mulf %{{.*}}, %{{.*}} : bf16
// CHECK-NEXT: linalg.yield %[[SWIGLU]] : bf16
// CHECK: linalg.generic {indexing_maps = [#[[A]], {{.*}}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[H]], %[[W]] : tensor<2x16x32xbf16>, tensor<2x32x8xbf16>)
// CHECK-NEXT: ^bb0(%[[P:.*]]: bf16, %[[Q:.*]]: bf16, %[[ACC:.*]]: f32):
// CHECK-NEXT: %[[PE:.*]] = arith.extf %[[P]] : bf16 to f32
// CHECK-NEXT: %[[QE:.*]] = arith.extf %[[Q]] : bf16 to f32
// CHECK-NEXT: %[[M:.*]] = arith.mulf %[[PE]], %[[QE]] : f32
// CHECK-NEXT: %[[S:.*]] = arith.addf %[[ACC]], %[[M]] : f32
// CHECK-NEXT: linalg.yield %[[S]] : f32
func.func @swiglu_product(%x: tensor<2x16x32xf32>, %y: tensor<2x16x32xf32>, %w: tensor<2x32x8xbf16>) -> tensor<2x16x8xf32> {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<2x16x8xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  %r = linalg.generic {indexing_maps = [#a, #a, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %y, %w : tensor<2x16x32xf32>, tensor<2x16x32xf32>, tensor<2x32x8xbf16>) outs(%acc : tensor<2x16x8xf32>) {
  ^bb0(%p: f32, %q: f32, %v: bf16, %s: f32):
    %qb = arith.truncf %q : f32 to bf16
    %pb = arith.truncf %p : f32 to bf16
    %pe = arith.extf %pb : bf16 to f32
    %n = arith.negf %pe : f32
    %ex = math.exp %n : f32
    %d = arith.addf %ex, %one : f32
    %sg = arith.divf %one, %d : f32
    %si = arith.mulf %pe, %sg : f32
    %sb = arith.truncf %si : f32 to bf16
    %h = arith.mulf %sb, %qb : bf16
    %he = arith.extf %h : bf16 to f32
    %ve = arith.extf %v : bf16 to f32
    %m = arith.mulf %he, %ve : f32
    %t = arith.addf %s, %m : f32
    linalg.yield %t : f32
  } -> tensor<2x16x8xf32>
  return %r : tensor<2x16x8xf32>
}

// -----

// An RMSNorm prologue: the row scale and the column weight are indexed by fewer loops than
// the activations; the factor tensor takes the activations' indices.
#x = affine_map<(m, n, k) -> (m, k)>
#r = affine_map<(m, n, k) -> (m)>
#g = affine_map<(m, n, k) -> (k)>
#wt = affine_map<(m, n, k) -> (k, n)>
#out = affine_map<(m, n, k) -> (m, n)>
// CHECK-DAG: #[[ROW:.*]] = affine_map<(d0, d1) -> (d0)>
// CHECK-DAG: #[[COL:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @norm_product(
// CHECK: %[[F:.*]] = linalg.generic {indexing_maps = [#{{.*}}, #[[ROW]], #[[COL]], #{{.*}}], iterator_types = ["parallel", "parallel"]} {{.*}} outs(%{{.*}} : tensor<16x32xbf16>)
// CHECK: linalg.generic {{.*}} ins(%[[F]], %{{.*}} : tensor<16x32xbf16>, tensor<32x8xbf16>)
func.func @norm_product(%x: tensor<16x32xf32>, %r: tensor<16xf32>, %g: tensor<32xf32>, %w: tensor<32x8xbf16>, %acc: tensor<16x8xf32>) -> tensor<16x8xf32> {
  %0 = linalg.generic {indexing_maps = [#x, #r, #g, #wt, #out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %r, %g, %w : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<32x8xbf16>) outs(%acc : tensor<16x8xf32>) {
  ^bb0(%a: f32, %s: f32, %c: f32, %v: bf16, %o: f32):
    %n = arith.mulf %a, %s : f32
    %t = arith.mulf %n, %c : f32
    %b = arith.truncf %t : f32 to bf16
    %be = arith.extf %b : bf16 to f32
    %ve = arith.extf %v : bf16 to f32
    %m = arith.mulf %be, %ve : f32
    %y = arith.addf %o, %m : f32
    linalg.yield %y : f32
  } -> tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}

// -----

// Left alone: a factor read from a bf16 input already; a body that is more than a product
// (its yield also adds a part of the factor).
#a2 = affine_map<(m, n, k) -> (m, k)>
#w2 = affine_map<(m, n, k) -> (k, n)>
#o2 = affine_map<(m, n, k) -> (m, n)>
// CHECK-LABEL: func.func @left_alone(
// CHECK-NOT: tensor.empty() : tensor<{{.*}}xbf16>
// CHECK: return
func.func @left_alone(%x: tensor<16x32xbf16>, %y: tensor<16x32xf32>, %w: tensor<32x8xbf16>, %acc: tensor<16x8xf32>) -> (tensor<16x8xf32>, tensor<16x8xf32>) {
  %0 = linalg.generic {indexing_maps = [#a2, #w2, #o2], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x32xbf16>, tensor<32x8xbf16>) outs(%acc : tensor<16x8xf32>) {
  ^bb0(%a: bf16, %v: bf16, %o: f32):
    %ae = arith.extf %a : bf16 to f32
    %ve = arith.extf %v : bf16 to f32
    %m = arith.mulf %ae, %ve : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<16x8xf32>
  %1 = linalg.generic {indexing_maps = [#a2, #w2, #o2], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%y, %w : tensor<16x32xf32>, tensor<32x8xbf16>) outs(%acc : tensor<16x8xf32>) {
  ^bb0(%a: f32, %v: bf16, %o: f32):
    %t = arith.mulf %a, %a : f32
    %b = arith.truncf %t : f32 to bf16
    %be = arith.extf %b : bf16 to f32
    %ve = arith.extf %v : bf16 to f32
    %m = arith.mulf %be, %ve : f32
    %s = arith.addf %o, %m : f32
    %u = arith.addf %s, %t : f32
    linalg.yield %u : f32
  } -> tensor<16x8xf32>
  return %0, %1 : tensor<16x8xf32>, tensor<16x8xf32>
}
