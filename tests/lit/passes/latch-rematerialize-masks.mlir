// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-rematerialize-masks)' | FileCheck %s
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-rematerialize-masks, linalg-fuse-elementwise-ops)' | FileCheck %s --check-prefix=FUSED
//
// A one-hot mask [slot[k] == row] with two readers (the MoE dispatch's forward and the
// combine's backward share it after CSE): the pass gives the second reader its own copy, so
// elementwise fusion can put one copy into each reader and no [rows x sources] mask is
// left.  The slot vector reaches the mask through an expand_shape adding a unit dim, read
// at a constant 0; the copies read the vector itself.
#col = affine_map<(r, k) -> (k, 0)>
#row = affine_map<(r, k) -> (r)>
#id = affine_map<(r, k) -> (r, k)>
#m_hit = affine_map<(r, n, k) -> (r, k)>
#m_val = affine_map<(r, n, k) -> (k, n)>
#m_out = affine_map<(r, n, k) -> (r, n)>
// CHECK-LABEL: func.func @two_readers(
// CHECK-SAME: %[[SLOT:[a-z0-9]+]]: tensor<100xi64>
// CHECK: %[[M1:.+]] = linalg.generic {{.*}} ins(%[[SLOT]], %{{.*}} : tensor<100xi64>, tensor<70xi64>)
// CHECK: %[[M2:.+]] = linalg.generic {{.*}} ins(%[[SLOT]], %{{.*}} : tensor<100xi64>, tensor<70xi64>)
// CHECK: linalg.generic {{.*}} ins(%[[M2]], %arg2 : tensor<70x100xi1>, tensor<100x48xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[M1]], %arg3 : tensor<70x100xi1>, tensor<100x48xf32>)
// FUSED-LABEL: func.func @two_readers(
// FUSED-NOT: tensor<70x100xi1>
// FUSED: arith.cmpi eq
// FUSED: arith.uitofp
// FUSED: arith.cmpi eq
// FUSED: arith.uitofp
// FUSED-NOT: tensor<70x100xi1>
// FUSED: return
func.func @two_readers(%slot: tensor<100xi64>, %rows: tensor<70xi64>, %v: tensor<100x48xf32>,
                       %g: tensor<100x48xf32>) -> (tensor<70x48xf32>, tensor<70x48xf32>) {
  %s2 = tensor.expand_shape %slot [[0, 1]] output_shape [100, 1] : tensor<100xi64> into tensor<100x1xi64>
  %e = tensor.empty() : tensor<70x100xi1>
  %mask = linalg.generic {indexing_maps = [#col, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s2, %rows : tensor<100x1xi64>, tensor<70xi64>) outs(%e : tensor<70x100xi1>) {
  ^bb0(%t: i64, %r: i64, %o: i1):
    %c = arith.cmpi eq, %t, %r : i64
    linalg.yield %c : i1
  } -> tensor<70x100xi1>
  %z = arith.constant 0.0 : f32
  %e2 = tensor.empty() : tensor<70x48xf32>
  %zero = linalg.fill ins(%z : f32) outs(%e2 : tensor<70x48xf32>) -> tensor<70x48xf32>
  %a = linalg.generic {indexing_maps = [#m_hit, #m_val, #m_out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%mask, %v : tensor<70x100xi1>, tensor<100x48xf32>) outs(%zero : tensor<70x48xf32>) {
  ^bb0(%p: i1, %x: f32, %acc: f32):
    %f = arith.uitofp %p : i1 to f32
    %m = arith.mulf %f, %x : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<70x48xf32>
  %b = linalg.generic {indexing_maps = [#m_hit, #m_val, #m_out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%mask, %g : tensor<70x100xi1>, tensor<100x48xf32>) outs(%zero : tensor<70x48xf32>) {
  ^bb0(%p: i1, %x: f32, %acc: f32):
    %f = arith.uitofp %p : i1 to f32
    %m = arith.mulf %f, %x : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<70x48xf32>
  return %a, %b : tensor<70x48xf32>, tensor<70x48xf32>
}

// -----
// Not masks, or not cheap: a float broadcast keeps its one copy, and so does a comparison
// whose inputs are as large as its result (recomputing it would read as much as it saves).
#b_in = affine_map<(i, j) -> (j)>
#b_id = affine_map<(i, j) -> (i, j)>
// CHECK-LABEL: func.func @left_alone(
// CHECK-COUNT-2: linalg.generic
// CHECK-NOT: linalg.generic
func.func @left_alone(%x: tensor<100xf32>, %a: tensor<70x100xf32>) -> (tensor<70x100xf32>, tensor<70x100xf32>, tensor<70x100xi1>, tensor<70x100xi1>) {
  %e = tensor.empty() : tensor<70x100xf32>
  %bc = linalg.generic {indexing_maps = [#b_in, #b_id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<100xf32>) outs(%e : tensor<70x100xf32>) {
  ^bb0(%v: f32, %o: f32):
    linalg.yield %v : f32
  } -> tensor<70x100xf32>
  %ei = tensor.empty() : tensor<70x100xi1>
  %z = arith.constant 0.0 : f32
  %pos = linalg.generic {indexing_maps = [#b_id, #b_id], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<70x100xf32>) outs(%ei : tensor<70x100xi1>) {
  ^bb0(%v: f32, %o: i1):
    %c = arith.cmpf ogt, %v, %z : f32
    linalg.yield %c : i1
  } -> tensor<70x100xi1>
  return %bc, %bc, %pos, %pos : tensor<70x100xf32>, tensor<70x100xf32>, tensor<70x100xi1>, tensor<70x100xi1>
}
