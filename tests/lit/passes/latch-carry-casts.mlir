// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-carry-casts)' | FileCheck %s
// A parameter read only rounded to bf16 keeps its rounded copy as state: a "copy" state
// after the others (an argument before the inputs, a result before the outputs); its casts
// read that argument (a cast of a transpose, the same transpose of it), and the optimizer's
// generic rounds the new value as one more output.  A parameter the update leaves alone
// returns the copy's argument; one whose new value no all-parallel generic computes, or
// that is never rounded, stays as it was.

// CHECK-LABEL: func.func @update(
// CHECK-SAME: %[[W:[^:]*]]: tensor<4x8xf32>, %[[V:[^:]*]]: tensor<8x4xf32>, %[[B:[^:]*]]: tensor<8xf32>, %[[WC:[^:]*]]: tensor<4x8xbf16>, %[[VC:[^:]*]]: tensor<8x4xbf16>, %[[X:[^:]*]]: tensor<2x4xbf16>)
// CHECK-SAME: -> (tensor<4x8xf32>, tensor<8x4xf32>, tensor<8xf32>, tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<f32>)
// CHECK-SAME: {kind = "copy", name = "w.bf16", of = "w", type = tensor<4x8xbf16>}, {kind = "copy", name = "v.bf16", of = "v", type = tensor<8x4xbf16>}
// CHECK-NOT: arith.truncf
// CHECK: linalg.matmul ins(%[[X]], %[[WC]] : tensor<2x4xbf16>, tensor<4x8xbf16>)
// CHECK: %[[T:.*]] = linalg.transpose ins(%[[VC]] : tensor<8x4xbf16>) {{.*}} permutation = [1, 0]
// CHECK: linalg.matmul ins(%{{.*}}, %[[T]] : tensor<2x4xbf16>, tensor<4x8xbf16>)
// CHECK: %[[NEW:.*]]:2 = linalg.generic {{.*}} ins(%[[W]], %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32>) outs(%{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<4x8xbf16>)
// CHECK: %[[S:.*]] = arith.subf
// CHECK: %[[R:.*]] = arith.truncf %[[S]] : f32 to bf16
// CHECK: linalg.yield %[[S]], %[[R]] : f32, bf16
// CHECK: return %[[NEW]]#0, %[[V]], %{{.*}}, %[[NEW]]#1, %[[VC]], %{{.*}} :
#id = affine_map<(d0, d1) -> (d0, d1)>
#id1 = affine_map<(d0) -> (d0)>
func.func @update(%w: tensor<4x8xf32>, %v: tensor<8x4xf32>, %b: tensor<8xf32>,
                  %x: tensor<2x4xbf16>)
    -> (tensor<4x8xf32>, tensor<8x4xf32>, tensor<8xf32>, tensor<f32>)
    attributes {latch.abi = {num_inputs = 1 : i64, num_returns = 1 : i64, states = [
      {kind = "param", name = "w", type = tensor<4x8xf32>},
      {kind = "param", name = "v", type = tensor<8x4xf32>},
      {kind = "param", name = "b", type = tensor<8xf32>}]}} {
  %zero = arith.constant 0.0 : f32
  %eb = tensor.empty() : tensor<4x8xbf16>
  %wb = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : tensor<4x8xf32>) outs(%eb : tensor<4x8xbf16>) {
    ^bb0(%a: f32, %o: bf16):
      %r = arith.truncf %a : f32 to bf16
      linalg.yield %r : bf16
  } -> tensor<4x8xbf16>
  %e0 = tensor.empty() : tensor<2x8xf32>
  %z0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = linalg.matmul ins(%x, %wb : tensor<2x4xbf16>, tensor<4x8xbf16>) outs(%z0 : tensor<2x8xf32>) -> tensor<2x8xf32>
  // v is read through a transpose, then rounded
  %et = tensor.empty() : tensor<4x8xf32>
  %vt = linalg.transpose ins(%v : tensor<8x4xf32>) outs(%et : tensor<4x8xf32>) permutation = [1, 0]
  %eb2 = tensor.empty() : tensor<4x8xbf16>
  %vb = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%vt : tensor<4x8xf32>) outs(%eb2 : tensor<4x8xbf16>) {
    ^bb0(%a: f32, %o: bf16):
      %r = arith.truncf %a : f32 to bf16
      linalg.yield %r : bf16
  } -> tensor<4x8xbf16>
  %y2 = linalg.matmul ins(%x, %vb : tensor<2x4xbf16>, tensor<4x8xbf16>) outs(%z0 : tensor<2x8xf32>) -> tensor<2x8xf32>
  // the optimizer: w - y (standing in for an update) through an identity map
  %ey = tensor.empty() : tensor<4x8xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0 mod 2, d1)>, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : tensor<2x8xf32>) outs(%ey : tensor<4x8xf32>) {
    ^bb0(%a: f32, %o: f32):
      linalg.yield %a : f32
  } -> tensor<4x8xf32>
  %en = tensor.empty() : tensor<4x8xf32>
  %nw = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w, %g : tensor<4x8xf32>, tensor<4x8xf32>) outs(%en : tensor<4x8xf32>) {
    ^bb0(%a: f32, %c: f32, %o: f32):
      %s = arith.subf %a, %c : f32
      linalg.yield %s : f32
  } -> tensor<4x8xf32>
  // b is never rounded: stays f32 state without a copy
  %eb3 = tensor.empty() : tensor<8xf32>
  %nb = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]}
      ins(%b : tensor<8xf32>) outs(%eb3 : tensor<8xf32>) {
    ^bb0(%a: f32, %o: f32):
      %s = arith.addf %a, %a : f32
      linalg.yield %s : f32
  } -> tensor<8xf32>
  %loss = tensor.empty() : tensor<f32>
  return %nw, %v, %nb, %loss : tensor<4x8xf32>, tensor<8x4xf32>, tensor<8xf32>, tensor<f32>
}

// -----

// The new value comes from something other than an all-parallel generic (here a
// reduction): nothing is carried.
// CHECK-LABEL: func.func @not_elementwise(
// CHECK-SAME: %{{[^:]*}}: tensor<4xf32>, %{{[^:]*}}: tensor<4x4xf32>, %{{[^:]*}}: tensor<4xbf16>)
// CHECK-NOT: kind = "copy"
// CHECK: arith.truncf
#id = affine_map<(d0) -> (d0)>
func.func @not_elementwise(%w: tensor<4xf32>, %m: tensor<4x4xf32>, %x: tensor<4xbf16>)
    -> (tensor<4xf32>, tensor<4xbf16>)
    attributes {latch.abi = {num_inputs = 2 : i64, num_returns = 1 : i64, states = [
      {kind = "param", name = "w", type = tensor<4xf32>}]}} {
  %eb = tensor.empty() : tensor<4xbf16>
  %wb = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%w : tensor<4xf32>) outs(%eb : tensor<4xbf16>) {
    ^bb0(%a: f32, %o: bf16):
      %r = arith.truncf %a : f32 to bf16
      linalg.yield %r : bf16
  } -> tensor<4xbf16>
  %e = tensor.empty() : tensor<4xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%m : tensor<4x4xf32>) outs(%w : tensor<4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %t = arith.addf %a, %o : f32
      linalg.yield %t : f32
  } -> tensor<4xf32>
  return %s, %wb : tensor<4xf32>, tensor<4xbf16>
}

// -----

// Two update variants (every(N)): w is carried in both (one leaves it unchanged and returns
// the copy's argument); v only where every variant can carry it, and the second variant's
// new v is no generic's result: v keeps its casts in both.
// CHECK-LABEL: func.func @variant0(
// CHECK-SAME: %{{[^:]*}}: tensor<4xf32>, %{{[^:]*}}: tensor<4xf32>, %[[WC0:[^:]*]]: tensor<4xbf16>)
// CHECK-SAME: -> (tensor<4xf32>, tensor<4xf32>, tensor<4xbf16>, tensor<4xbf16>)
// CHECK-SAME: states = [{kind = "param", name = "w", type = tensor<4xf32>}, {kind = "param", name = "v", type = tensor<4xf32>}, {kind = "copy", name = "w.bf16", of = "w", type = tensor<4xbf16>}]
// CHECK: %[[N:.*]]:2 = linalg.generic
// CHECK: return %[[N]]#0, %{{.*}}, %[[N]]#1, %[[WC0]] :
// CHECK-LABEL: func.func @variant1(
// CHECK-SAME: %[[W:[^:]*]]: tensor<4xf32>, %[[V:[^:]*]]: tensor<4xf32>, %[[WC:[^:]*]]: tensor<4xbf16>)
// CHECK-SAME: states = [{kind = "param", name = "w", type = tensor<4xf32>}, {kind = "param", name = "v", type = tensor<4xf32>}, {kind = "copy", name = "w.bf16", of = "w", type = tensor<4xbf16>}]
// CHECK: return %[[W]], %{{.*}}, %[[WC]], %{{.*}} :
#id = affine_map<(d0) -> (d0)>
func.func @variant0(%w: tensor<4xf32>, %v: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xbf16>)
    attributes {latch.abi = {num_inputs = 0 : i64, num_returns = 1 : i64, states = [
      {kind = "param", name = "w", type = tensor<4xf32>},
      {kind = "param", name = "v", type = tensor<4xf32>}]}} {
  %eb = tensor.empty() : tensor<4xbf16>
  %wb = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%w : tensor<4xf32>) outs(%eb : tensor<4xbf16>) {
    ^bb0(%a: f32, %o: bf16):
      %r = arith.truncf %a : f32 to bf16
      linalg.yield %r : bf16
  } -> tensor<4xbf16>
  %vb = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%v : tensor<4xf32>) outs(%eb : tensor<4xbf16>) {
    ^bb0(%a: f32, %o: bf16):
      %r = arith.truncf %a : f32 to bf16
      linalg.yield %r : bf16
  } -> tensor<4xbf16>
  %e = tensor.empty() : tensor<4xf32>
  %nw = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%w : tensor<4xf32>) outs(%e : tensor<4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %s = arith.mulf %a, %a : f32
      linalg.yield %s : f32
  } -> tensor<4xf32>
  %nv = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%v : tensor<4xf32>) outs(%e : tensor<4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %s = arith.addf %a, %a : f32
      linalg.yield %s : f32
  } -> tensor<4xf32>
  return %nw, %nv, %wb : tensor<4xf32>, tensor<4xf32>, tensor<4xbf16>
}
func.func @variant1(%w: tensor<4xf32>, %v: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xbf16>)
    attributes {latch.abi = {num_inputs = 0 : i64, num_returns = 1 : i64, states = [
      {kind = "param", name = "w", type = tensor<4xf32>},
      {kind = "param", name = "v", type = tensor<4xf32>}]}} {
  %eb = tensor.empty() : tensor<4xbf16>
  %wb = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%w : tensor<4xf32>) outs(%eb : tensor<4xbf16>) {
    ^bb0(%a: f32, %o: bf16):
      %r = arith.truncf %a : f32 to bf16
      linalg.yield %r : bf16
  } -> tensor<4xbf16>
  %vb = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%v : tensor<4xf32>) outs(%eb : tensor<4xbf16>) {
    ^bb0(%a: f32, %o: bf16):
      %r = arith.truncf %a : f32 to bf16
      linalg.yield %r : bf16
  } -> tensor<4xbf16>
  %m = tensor.empty() : tensor<4x4xf32>
  %nv = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%m : tensor<4x4xf32>) outs(%v : tensor<4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %t = arith.addf %a, %o : f32
      linalg.yield %t : f32
  } -> tensor<4xf32>
  return %w, %nv, %vb : tensor<4xf32>, tensor<4xf32>, tensor<4xbf16>
}
