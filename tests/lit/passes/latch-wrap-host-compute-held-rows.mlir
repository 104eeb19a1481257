// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-wrap-host-compute{held-rows=true})' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-wrap-host-compute)' | FileCheck %s --check-prefix=AGAIN
// RMSNorm's backward: the row sums of g * w * x, then dx += g * w * rstd - x * s read row
// by row by the same warps (row-readers).  A lane walks 768 columns as 6 chunks of 4.
// With held-rows both passes are straight-line code and the reader takes the first pass's
// loaded chunks of g, w and x: after the total is handed out (gpu.shuffle idx) the lane
// loads only dx (in place) and rstd.  By default the reader loads them again, in a loop.

#rc = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0)>
#c = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @norm_backward(
// CHECK: gpu.launch
// CHECK-NOT: scf.for
// CHECK-COUNT-6: vector.load %arg0[
// CHECK: gpu.shuffle idx
// CHECK-NOT: vector.load %arg0[
// CHECK-NOT: vector.load %arg1[
// CHECK-NOT: vector.load %arg2[
// CHECK: vector.load %arg4[
// CHECK: gpu.terminator
// AGAIN-LABEL: func.func @norm_backward(
// AGAIN: gpu.shuffle idx
// AGAIN: scf.for
// AGAIN: vector.load %arg0[
// AGAIN: gpu.terminator
func.func @norm_backward(%g: memref<64x768xf32>, %w: memref<768xf32>, %x: memref<64x768xf32>,
                         %rstd: memref<64xf32>, %dx: memref<64x768xf32>, %s: memref<64xf32>) {
  linalg.generic {indexing_maps = [#rc, #c, #rc, #r], iterator_types = ["parallel", "reduction"]}
      ins(%g, %w, %x : memref<64x768xf32>, memref<768xf32>, memref<64x768xf32>)
      outs(%s : memref<64xf32>) {
    ^bb0(%a: f32, %b: f32, %e: f32, %o: f32):
      %p = arith.mulf %a, %b : f32
      %q = arith.mulf %p, %e : f32
      %t = arith.addf %q, %o : f32
      linalg.yield %t : f32
  }
  linalg.generic {indexing_maps = [#rc, #rc, #c, #r, #r, #rc, #rc],
                  iterator_types = ["parallel", "parallel"]}
      ins(%dx, %g, %w, %rstd, %s, %x : memref<64x768xf32>, memref<64x768xf32>,
          memref<768xf32>, memref<64xf32>, memref<64xf32>, memref<64x768xf32>)
      outs(%dx : memref<64x768xf32>) {
    ^bb0(%d: f32, %a: f32, %b: f32, %rs: f32, %t: f32, %e: f32, %o: f32):
      %p = arith.mulf %a, %b : f32
      %q = arith.mulf %p, %rs : f32
      %u = arith.mulf %e, %t : f32
      %z = arith.addf %d, %q : f32
      %r = arith.subf %z, %u : f32
      linalg.yield %r : f32
  }
  return
}
