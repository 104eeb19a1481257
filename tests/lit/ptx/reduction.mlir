// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-to-ptx)' --emit=ptx | FileCheck %s
// A row-sum of 96-element rows: a group of 16 lanes per row (row_reductions.short_row_lanes:
// about 8 elements a lane, two rows a warp); each lane sums a strided part of the row in a
// register, two consecutive elements a load (the 16 lanes walk the row in whole 8-byte
// chunks: row_reductions._row_chunk), four butterfly shuffles add the group's lanes, lane 0
// adds the total to the output's initial value: the zero it was filled with, a constant
// (latch-wrap-host-compute{fold-zeros}: no fill kernel, no load of the output).

// CHECK-LABEL: gpu.binary "row_sum_kernel"
// CHECK: .visible .entry row_sum_kernel(
// CHECK: ld.global.v2.b32
// CHECK-COUNT-2: add.rn.f32
// CHECK-COUNT-4: shfl.sync.bfly.b32
// CHECK-NOT: shfl.sync.bfly.b32
// CHECK-NOT: ld.global
// CHECK: add.rn.f32 %{{.*}}, %{{.*}}, 0f00000000;
// CHECK: st.global.b32
// CHECK-NOT: gpu.binary
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @row_sum(%a: tensor<128x96xf32>) -> tensor<128xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<128xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<128xf32>) -> tensor<128xf32>
  %r = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%a : tensor<128x96xf32>) outs(%f : tensor<128xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %x, %acc : f32
    linalg.yield %s : f32
  } -> tensor<128xf32>
  return %r : tensor<128xf32>
}
