// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-to-ptx)' --emit=ptx | FileCheck %s
// linalg.matmul on tensors (f32) into a zero-filled output: one kernel, the tiled SIMT
// contraction kernel of latch-form-contraction-kernels: operands staged through shared
// memory, a 4x4 register tile of fused multiply-adds per thread, the sums stored into the
// output (the zero fill is gone: nothing reads the output before the product).

// CHECK-NOT: gpu.binary "mm_kernel"
// CHECK-LABEL: gpu.binary "latch_contract_0"
// CHECK: .visible .entry contract(
// CHECK: .shared .align 4 .b8
// CHECK: ld.global.b32
// CHECK: st.shared.b32
// CHECK: bar.sync
// CHECK: ld.shared.b32
// CHECK: fma.rn.f32
// CHECK: st.global.b32
func.func @mm(%a: tensor<64x32xf32>, %b: tensor<32x16xf32>) -> tensor<64x16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x16xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<64x16xf32>) -> tensor<64x16xf32>
  %m = linalg.matmul ins(%a, %b : tensor<64x32xf32>, tensor<32x16xf32>) outs(%f : tensor<64x16xf32>) -> tensor<64x16xf32>
  return %m : tensor<64x16xf32>
}
