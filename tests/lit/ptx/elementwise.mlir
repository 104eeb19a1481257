// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-to-ptx)' --emit=ptx | FileCheck %s
// An elementwise add + relu on tensors becomes one sm_90 kernel reading two buffers.

// CHECK-LABEL: gpu.binary "add_relu_kernel"
// CHECK: .target sm_90
// CHECK: .visible .entry add_relu_kernel(
// CHECK-COUNT-2: ld.global
// CHECK: add.rn.f32
// CHECK: max.NaN.f32
// CHECK: st.global
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @add_relu(%a: tensor<64x16xf32>, %b: tensor<64x16xf32>) -> tensor<64x16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x16xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<64x16xf32>, tensor<64x16xf32>) outs(%e : tensor<64x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    %t = arith.maximumf %s, %z : f32
    linalg.yield %t : f32
  } -> tensor<64x16xf32>
  return %r : tensor<64x16xf32>
}
