// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-to-ptx)' --emit=ptx | FileCheck %s
// A causal latch.attention (tensor form) through the whole cuda pipeline: one kernel, the
// fused forward of latch-form-attention-kernels — K/V tiles copied by cp.async, fragments
// read with ldmatrix (transposed for V), the 64 x 64 score block and o += p v on the tensor
// cores (64 mma.sync per key tile: 8 for each of Q K^T's 4 k-steps, 8 for each of P V's 4),
// row maxima and sums across a row's 4 threads by butterfly shuffles, exponentials as ex2;
// o stored as bf16 pairs, lse as f32.  No other kernel: no scores are stored.

// CHECK: gpu.binary "latch_attention_0"
// CHECK-NOT: gpu.binary
// CHECK: .visible .entry attention(
// CHECK: cp.async.cg.shared.global
// CHECK: cp.async.wait_group 1;
// CHECK: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-COUNT-32: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK: shfl.sync.bfly.b32
// CHECK: ex2.approx.f32
// CHECK: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// CHECK-COUNT-32: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK: st.global.b32
func.func @attend(%q: tensor<1x2x128x64xbf16>, %k: tensor<1x2x128x64xbf16>, %v: tensor<1x2x128x64xbf16>) -> tensor<1x2x128x64xbf16> {
  %o, %lse = "latch.attention"(%q, %k, %v) {causal = true, scale = 0.125 : f64} : (tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>) -> (tensor<1x2x128x64xbf16>, tensor<1x2x128xf32>)
  return %o : tensor<1x2x128x64xbf16>
}
