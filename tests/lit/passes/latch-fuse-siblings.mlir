// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-fuse-siblings{min-bytes=0})' | FileCheck %s
// Two elementwise generics over the same loops that read the same tensor become one with
// two results: the shared input once, A's body then B's.  Where A's result is read
// before B (a product between them), the pair goes where A was, B's empty init made
// there.  A generic that reads the other's result, or shares no input, stays apart.

// CHECK-LABEL: func.func @swiglu_backward(
// CHECK: %[[F:.*]]:2 = linalg.generic {{.*}} ins(%arg0, %arg1, %arg2 : tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>) outs(%{{.*}}, %{{.*}} : tensor<4x8xbf16>, tensor<4x8xbf16>)
// CHECK: math.exp
// CHECK: arith.mulf
// CHECK: math.exp
// CHECK: linalg.yield %{{.*}}, %{{.*}} : bf16, bf16
// CHECK-NOT: linalg.generic
// CHECK: return %[[F]]#0, %[[F]]#1
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @swiglu_backward(%dy: tensor<4x8xbf16>, %g: tensor<4x8xbf16>, %u: tensor<4x8xbf16>)
    -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<4x8xbf16>
  %du = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%dy, %g : tensor<4x8xbf16>, tensor<4x8xbf16>) outs(%e : tensor<4x8xbf16>) {
    ^bb0(%a: bf16, %b: bf16, %o: bf16):
      %x = arith.extf %b : bf16 to f32
      %n = arith.negf %x : f32
      %ex = math.exp %n : f32
      %d = arith.addf %ex, %one : f32
      %s = arith.divf %x, %d : f32
      %sb = arith.truncf %s : f32 to bf16
      %m = arith.mulf %a, %sb : bf16
      linalg.yield %m : bf16
  } -> tensor<4x8xbf16>
  %e2 = tensor.empty() : tensor<4x8xbf16>
  %dg = linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%dy, %u, %g : tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>) outs(%e2 : tensor<4x8xbf16>) {
    ^bb0(%a: bf16, %b: bf16, %c: bf16, %o: bf16):
      %x = arith.extf %c : bf16 to f32
      %n = arith.negf %x : f32
      %ex = math.exp %n : f32
      %d = arith.addf %ex, %one : f32
      %sg = arith.divf %one, %d : f32
      %p = arith.mulf %a, %b : bf16
      %pf = arith.extf %p : bf16 to f32
      %r = arith.mulf %pf, %sg : f32
      %rb = arith.truncf %r : f32 to bf16
      linalg.yield %rb : bf16
  } -> tensor<4x8xbf16>
  return %du, %dg : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// CHECK-LABEL: func.func @read_between(
// CHECK: %[[F:.*]]:2 = linalg.generic {{.*}} ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: linalg.generic {{.*}}"reduction"{{.*}} ins(%[[F]]#0
// CHECK: return
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @read_between(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xf32>) {
  %e = tensor.empty() : tensor<4x8xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%v: f32, %o: f32):
      %m = arith.mulf %v, %v : f32
      linalg.yield %m : f32
  } -> tensor<4x8xf32>
  %z = arith.constant 0.0 : f32
  %er = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%z : f32) outs(%er : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%a : tensor<4x8xf32>) outs(%f : tensor<4xf32>) {
    ^bb0(%v: f32, %o: f32):
      %t = arith.addf %v, %o : f32
      linalg.yield %t : f32
  } -> tensor<4xf32>
  %e2 = tensor.empty() : tensor<4x8xf32>
  %b = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %y : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e2 : tensor<4x8xf32>) {
    ^bb0(%v: f32, %w: f32, %o: f32):
      %m = arith.addf %v, %w : f32
      linalg.yield %m : f32
  } -> tensor<4x8xf32>
  return %s, %b : tensor<4xf32>, tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @dependent_or_unrelated(
// CHECK-COUNT-3: linalg.generic
// CHECK-NOT: linalg.generic
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @dependent_or_unrelated(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %e = tensor.empty() : tensor<4x8xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%v: f32, %o: f32):
      %m = arith.mulf %v, %v : f32
      linalg.yield %m : f32
  } -> tensor<4x8xf32>
  %b = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %a : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%v: f32, %w: f32, %o: f32):
      %m = arith.addf %v, %w : f32
      linalg.yield %m : f32
  } -> tensor<4x8xf32>
  %c = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%v: f32, %o: f32):
      %m = arith.negf %v : f32
      linalg.yield %m : f32
  } -> tensor<4x8xf32>
  return %a, %b, %c : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
