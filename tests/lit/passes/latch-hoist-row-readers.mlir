// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-hoist-row-readers{min-row=64})' | FileCheck %s
// A cross-entropy's shape: the row max and the sum of exponentials over the logits, then
// the loss's small ops (a token count), then the gradient reading the logits, both sums and
// the count.  The count (and the gradient's init) move in front of the row max, the
// gradient right after the sum; the loss's own op stays where it was.  A reader that
// needs a value computed from the sums (other than the sums) stays; a short row (under
// min-row) stays.

// CHECK-LABEL: func.func @loss(
// CHECK: %[[CNT:.*]] = linalg.generic {{.*}}iterator_types = ["reduction"]
// CHECK: %[[MAX:.*]] = linalg.generic {{.*}}ins(%arg0 : tensor<4x128xbf16>)
// CHECK: arith.maximumf
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}}ins(%arg0, %[[MAX]] :
// CHECK: math.exp
// CHECK: %[[GRAD:.*]] = linalg.generic {{.*}}ins(%arg0, %[[MAX]], %[[SUM]], %[[CNT]] :
// CHECK: %[[LOSS:.*]] = linalg.generic {{.*}}ins(%[[SUM]] :
// CHECK: math.log
// CHECK: return %[[LOSS]], %[[GRAD]]
#x = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0)>
#v = affine_map<(d0) -> (d0)>
#s = affine_map<(d0) -> ()>
#s2 = affine_map<(d0, d1) -> ()>
func.func @loss(%x: tensor<4x128xbf16>, %mask: tensor<4xf32>) -> (tensor<4xf32>, tensor<4x128xbf16>) {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e4 = tensor.empty() : tensor<4xf32>
  %m0 = linalg.fill ins(%ninf : f32) outs(%e4 : tensor<4xf32>) -> tensor<4xf32>
  %max = linalg.generic {indexing_maps = [#x, #r], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x128xbf16>) outs(%m0 : tensor<4xf32>) {
    ^bb0(%a: bf16, %acc: f32):
      %f = arith.extf %a : bf16 to f32
      %y = arith.maximumf %f, %acc : f32
      linalg.yield %y : f32
  } -> tensor<4xf32>
  %s0 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<4xf32>) -> tensor<4xf32>
  %sum = linalg.generic {indexing_maps = [#x, #r, #r], iterator_types = ["parallel", "reduction"]}
      ins(%x, %max : tensor<4x128xbf16>, tensor<4xf32>) outs(%s0 : tensor<4xf32>) {
    ^bb0(%a: bf16, %m: f32, %acc: f32):
      %f = arith.extf %a : bf16 to f32
      %d = arith.subf %f, %m : f32
      %e = math.exp %d : f32
      %y = arith.addf %e, %acc : f32
      linalg.yield %y : f32
  } -> tensor<4xf32>
  %loss = linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]}
      ins(%sum : tensor<4xf32>) outs(%e4 : tensor<4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %l = math.log %a : f32
      linalg.yield %l : f32
  } -> tensor<4xf32>
  %e0 = tensor.empty() : tensor<f32>
  %c0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<f32>) -> tensor<f32>
  %cnt = linalg.generic {indexing_maps = [#v, #s], iterator_types = ["reduction"]}
      ins(%mask : tensor<4xf32>) outs(%c0 : tensor<f32>) {
    ^bb0(%a: f32, %acc: f32):
      %y = arith.addf %a, %acc : f32
      linalg.yield %y : f32
  } -> tensor<f32>
  %eg = tensor.empty() : tensor<4x128xbf16>
  %grad = linalg.generic {indexing_maps = [#x, #r, #r, #s2, #x], iterator_types = ["parallel", "parallel"]}
      ins(%x, %max, %sum, %cnt : tensor<4x128xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) outs(%eg : tensor<4x128xbf16>) {
    ^bb0(%a: bf16, %m: f32, %s: f32, %n: f32, %o: bf16):
      %f = arith.extf %a : bf16 to f32
      %d = arith.subf %f, %m : f32
      %e = math.exp %d : f32
      %p = arith.divf %e, %s : f32
      %q = arith.divf %p, %n : f32
      %b = arith.truncf %q : f32 to bf16
      linalg.yield %b : bf16
  } -> tensor<4x128xbf16>
  return %loss, %grad : tensor<4xf32>, tensor<4x128xbf16>
}

// -----

// CHECK-LABEL: func.func @needs_the_loss(
// CHECK: math.exp
// CHECK: math.log
// CHECK: %[[GRAD:.*]] = linalg.generic
// CHECK: return
#x = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0)>
#v = affine_map<(d0) -> (d0)>
func.func @needs_the_loss(%x: tensor<4x128xf32>) -> tensor<4x128xf32> {
  %zero = arith.constant 0.0 : f32
  %e4 = tensor.empty() : tensor<4xf32>
  %s0 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<4xf32>) -> tensor<4xf32>
  %sum = linalg.generic {indexing_maps = [#x, #r], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x128xf32>) outs(%s0 : tensor<4xf32>) {
    ^bb0(%a: f32, %acc: f32):
      %e = math.exp %a : f32
      %y = arith.addf %e, %acc : f32
      linalg.yield %y : f32
  } -> tensor<4xf32>
  %lg = linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]}
      ins(%sum : tensor<4xf32>) outs(%e4 : tensor<4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %l = math.log %a : f32
      linalg.yield %l : f32
  } -> tensor<4xf32>
  %eg = tensor.empty() : tensor<4x128xf32>
  %grad = linalg.generic {indexing_maps = [#x, #r, #r, #x], iterator_types = ["parallel", "parallel"]}
      ins(%x, %sum, %lg : tensor<4x128xf32>, tensor<4xf32>, tensor<4xf32>) outs(%eg : tensor<4x128xf32>) {
    ^bb0(%a: f32, %s: f32, %l: f32, %o: f32):
      %d = arith.subf %a, %l : f32
      %p = arith.divf %d, %s : f32
      linalg.yield %p : f32
  } -> tensor<4x128xf32>
  return %grad : tensor<4x128xf32>
}

// -----

// CHECK-LABEL: func.func @short_rows(
// CHECK: math.exp
// CHECK: math.log
// CHECK: arith.divf
// CHECK: return
#x = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0)>
#v = affine_map<(d0) -> (d0)>
func.func @short_rows(%x: tensor<4x32xf32>) -> (tensor<4xf32>, tensor<4x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %e4 = tensor.empty() : tensor<4xf32>
  %s0 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<4xf32>) -> tensor<4xf32>
  %sum = linalg.generic {indexing_maps = [#x, #r], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x32xf32>) outs(%s0 : tensor<4xf32>) {
    ^bb0(%a: f32, %acc: f32):
      %e = math.exp %a : f32
      %y = arith.addf %e, %acc : f32
      linalg.yield %y : f32
  } -> tensor<4xf32>
  %lg = linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]}
      ins(%sum : tensor<4xf32>) outs(%e4 : tensor<4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %l = math.log %a : f32
      linalg.yield %l : f32
  } -> tensor<4xf32>
  %eg = tensor.empty() : tensor<4x32xf32>
  %grad = linalg.generic {indexing_maps = [#x, #r, #x], iterator_types = ["parallel", "parallel"]}
      ins(%x, %sum : tensor<4x32xf32>, tensor<4xf32>) outs(%eg : tensor<4x32xf32>) {
    ^bb0(%a: f32, %s: f32, %o: f32):
      %p = arith.divf %a, %s : f32
      linalg.yield %p : f32
  } -> tensor<4x32xf32>
  return %lg, %grad : tensor<4xf32>, tensor<4x32xf32>
}
