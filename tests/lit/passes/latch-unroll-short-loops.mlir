// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops), latch-register-accumulators, latch-unroll-short-loops)' | FileCheck %s
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-wrap-host-compute, func.func(convert-linalg-to-parallel-loops), latch-register-accumulators, latch-unroll-short-loops, latch-map-parallel-loops{block=32,8})' | FileCheck %s --check-prefix=LANES
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-wrap-host-compute, func.func(convert-linalg-to-parallel-loops), latch-register-accumulators, latch-unroll-short-loops, latch-map-parallel-loops{block=32,8 whole-stores=false})' | FileCheck %s --check-prefix=SPLIT
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops), latch-register-accumulators, latch-unroll-short-loops{max-trips=16})' | FileCheck %s --check-prefix=TRIPS16
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops), latch-register-accumulators, latch-unroll-short-loops{max-trips=16 max-ops=64})' | FileCheck %s --check-prefix=OPS64
// A router's input gradient, x += g @ W over 4 experts: the reduction loop over the experts
// is unrolled (the accumulator chained through the four terms, in order), so the body is
// straight-line and latch-map-parallel-loops (after latch-wrap-host-compute has put the
// unit-stride loop first) gives it vector lanes: 4, so that the f32 accumulators it stores
// move 16 bytes a store (the bf16 weights 8 a load); with whole-stores=false 8, so that the
// weights move 16 bytes a load and the accumulators 32 (two pieces a store).
// A loop longer than max-trips (8) stays a loop; so does one whose unrolled copies would
// be more than max-ops operations.

#x = affine_map<(t, d, e) -> (t, d)>
#g = affine_map<(t, d, e) -> (t, e)>
#w = affine_map<(t, d, e) -> (e, d)>
// CHECK-LABEL: func.func @router_grad(
// CHECK: scf.parallel
// CHECK-NOT: scf.for
// CHECK: %[[ACC:.*]] = memref.load %{{.*}} : memref<64x128xf32>
// CHECK: %[[T0:.*]] = arith.addf %[[ACC]], %{{.*}} : f32
// CHECK: %[[T1:.*]] = arith.addf %[[T0]], %{{.*}} : f32
// CHECK: %[[T2:.*]] = arith.addf %[[T1]], %{{.*}} : f32
// CHECK: %[[T3:.*]] = arith.addf %[[T2]], %{{.*}} : f32
// CHECK-NEXT: memref.store %[[T3]]
// LANES-LABEL: func.func @router_grad(
// LANES: vector.load %{{.*}} : memref<64x128xf32>, vector<4xf32>
// LANES: vector.load %{{.*}} : memref<4x128xbf16>, vector<4xbf16>
// LANES: vector.store %{{.*}} : memref<64x128xf32>, vector<4xf32>
// SPLIT-LABEL: func.func @router_grad(
// SPLIT: vector.load %{{.*}} : memref<64x128xf32>, vector<8xf32>
// SPLIT: vector.load %{{.*}} : memref<4x128xbf16>, vector<8xbf16>
// SPLIT: vector.store %{{.*}} : memref<64x128xf32>, vector<8xf32>
func.func @router_grad(%x: memref<64x128xf32>, %g: memref<64x4xbf16>, %w: memref<4x128xbf16>) {
  linalg.generic {indexing_maps = [#g, #w, #x], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%g, %w : memref<64x4xbf16>, memref<4x128xbf16>) outs(%x : memref<64x128xf32>) {
  ^bb0(%a: bf16, %b: bf16, %o: f32):
    %ae = arith.extf %a : bf16 to f32
    %be = arith.extf %b : bf16 to f32
    %p = arith.mulf %ae, %be : f32
    %s = arith.addf %o, %p : f32
    linalg.yield %s : f32
  }
  return
}

// -----
#x = affine_map<(t, d, e) -> (t, d)>
#g = affine_map<(t, d, e) -> (t, e)>
#w = affine_map<(t, d, e) -> (e, d)>
// CHECK-LABEL: func.func @long_reduction(
// CHECK: scf.parallel
// CHECK: scf.for
// With max-trips=16 its 16 terms unroll; with max-ops=64 too they would be more ops than
// that (16 copies of the body) and the loop stays.
// TRIPS16-LABEL: func.func @long_reduction(
// TRIPS16-NOT: scf.for
// TRIPS16: return
// OPS64-LABEL: func.func @long_reduction(
// OPS64: scf.for
func.func @long_reduction(%x: memref<64x128xf32>, %g: memref<64x16xbf16>, %w: memref<16x128xbf16>) {
  linalg.generic {indexing_maps = [#g, #w, #x], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%g, %w : memref<64x16xbf16>, memref<16x128xbf16>) outs(%x : memref<64x128xf32>) {
  ^bb0(%a: bf16, %b: bf16, %o: f32):
    %ae = arith.extf %a : bf16 to f32
    %be = arith.extf %b : bf16 to f32
    %p = arith.mulf %ae, %be : f32
    %s = arith.addf %o, %p : f32
    linalg.yield %s : f32
  }
  return
}
