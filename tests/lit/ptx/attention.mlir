// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-to-ptx)' --emit=ptx | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-to-ptx{chip=sm_90})' --emit=ptx | FileCheck %s --check-prefix=MMA
// A causal latch.attention (tensor form) through the whole cuda pipeline: one kernel, the
// fused forward of latch-form-attention-kernels — K/V tiles copied by cp.async, the 64 x 64
// score block and o += p v on the tensor cores, row maxima and sums across a row's 4
// threads by butterfly shuffles, exponentials as ex2; o stored as bf16 pairs, lse as f32.
// No other kernel: no scores are stored.
//
// On sm_90a (the default chip) the products are wgmma (passes/attention_wgmma.py): per key
// tile, the landed copies fenced to the async proxy, Q K^T as 4 m64n64k16 from the swizzled
// tiles; p written to a swizzled shared tile, fenced, the block meets, P V as 4 more.
// (LLVM places the loop's P V block before its Q K^T block in the text.)
// CHECK: gpu.binary "latch_attention_0"
// CHECK-NOT: gpu.binary
// CHECK: .visible .entry attention(
// CHECK: cp.async.cg.shared.global
// CHECK: shfl.sync.bfly.b32
// CHECK: ex2.approx.f32
// CHECK: st.shared.b32
// CHECK: fence.proxy.async.shared::cta;
// CHECK-NEXT: bar.sync 0;
// CHECK: wgmma.fence.sync.aligned;
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: wgmma.commit_group.sync.aligned;
// CHECK-NEXT: wgmma.wait_group.sync.aligned 0;
// CHECK: cp.async.wait_group 1;
// CHECK-NEXT: fence.proxy.async.shared::cta;
// CHECK-NEXT: bar.sync 0;
// CHECK: wgmma.fence.sync.aligned;
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: wgmma.commit_group.sync.aligned;
// CHECK-NEXT: wgmma.wait_group.sync.aligned 0;
// CHECK: st.global.b32
// CHECK-NOT: mma.sync
//
// On sm_90 the products are mma.sync from ldmatrix fragments (transposed for V): 64 per key
// tile, 8 for each of Q K^T's 4 k-steps, 8 for each of P V's 4 (here too the P V block comes
// first in the text).
// MMA: gpu.binary "latch_attention_0"
// MMA-NOT: gpu.binary
// MMA: .visible .entry attention(
// MMA: cp.async.cg.shared.global
// MMA: shfl.sync.bfly.b32
// MMA: ex2.approx.f32
// MMA: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// MMA-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// MMA: cp.async.wait_group 1;
// MMA-NEXT: bar.sync 0;
// MMA: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// MMA-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// MMA: st.global.b32
// MMA-NOT: wgmma
func.func @attend(%q: tensor<1x2x128x64xbf16>, %k: tensor<1x2x128x64xbf16>, %v: tensor<1x2x128x64xbf16>) -> tensor<1x2x128x64xbf16> {
  %o, %lse = "latch.attention"(%q, %k, %v) {causal = true, scale = 0.125 : f64} : (tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>) -> (tensor<1x2x128x64xbf16>, tensor<1x2x128xf32>)
  return %o : tensor<1x2x128x64xbf16>
}
