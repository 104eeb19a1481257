// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-lower-attention)' | FileCheck %s --check-prefix=LOWER
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-bufferize, latch-form-attention-kernels)' | FileCheck %s --check-prefix=KERNELS
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-bufferize, latch-form-attention-kernels{heavy-first=false})' | FileCheck %s --check-prefix=GRID
//
// A causal attention and its gradient on queries that are a transposed input.
//
// latch-lower-attention: operands read through to_buffer, one fresh 256-byte aligned buffer
// per result, the buffer-form op, results read back with to_tensor restrict.
// LOWER-LABEL: func.func @update(
// LOWER: %[[Q:.+]] = bufferization.to_buffer %{{.+}} read_only : tensor<1x2x64x16xbf16> to memref<1x2x64x16xbf16>
// LOWER: %[[O:.+]] = memref.alloc() {alignment = 256 : i64} : memref<1x2x64x16xbf16>
// LOWER: %[[L:.+]] = memref.alloc() {alignment = 256 : i64} : memref<1x2x64xf32>
// LOWER: "latch.attention"(%[[Q]], %{{.+}}, %{{.+}}, %[[O]], %[[L]]) {causal = true, scale = 2.500000e-01 : f64}
// LOWER: bufferization.to_tensor %[[O]] restrict writable
// LOWER: "latch.attention_grad"({{.+}}) {causal = true, scale = 2.500000e-01 : f64} : ({{.+}}) -> ()
// LOWER-NOT: "latch.attention
//
// latch-bufferize plans the buffers (the lse lives in the arena), then each op becomes
// launches over [batch, rows, E] views: the forward (one block per 64 queries and batch
// entry), then dQ and dK/dV; no scores are stored.
// KERNELS-LABEL: func.func @update(
// GRID: gpu.launch_func @latch_attention_0::@attention blocks in (%c1, %c2, %c1{{.*}})
// KERNELS: %[[LSE:.+]] = memref.alloc() {alignment = 256 : i64, latch.offset = {{[0-9]+}} : i64} : memref<1x2x64xf32>
// KERNELS: %[[L2:.+]] = memref.collapse_shape %[[LSE]] {{\[\[}}0, 1], [2]] : memref<1x2x64xf32> into memref<2x64xf32>
// causal: the blocks on a 1-D grid, heaviest first (heavy-first=true); one query block
// of 64 rows for each of the 2 heads
// KERNELS: gpu.launch_func @latch_attention_0::@attention blocks in (%c2, %c1, %c1{{.*}}) threads in (%c128, {{.+}} dynamic_shared_memory_size %c15360_i32 args({{.+}}, %[[L2]] : memref<2x64xf32>)
// KERNELS: gpu.launch_func @latch_attention_1::@attention_dq
// KERNELS: gpu.launch_func @latch_attention_2::@attention_dkdv
// KERNELS-NOT: "latch.attention
// KERNELS: gpu.module @latch_attention_0
// KERNELS: nvvm.mma.sync
// KERNELS: gpu.shuffle xor
// KERNELS: math.exp2

func.func @update(%x: tensor<1x64x2x16xbf16>, %do: tensor<1x2x64x16xbf16>) -> (tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>) {
  %e = tensor.empty() : tensor<1x2x64x16xbf16>
  %q = linalg.transpose ins(%x : tensor<1x64x2x16xbf16>) outs(%e : tensor<1x2x64x16xbf16>) permutation = [0, 2, 1, 3]
  %o, %lse = "latch.attention"(%q, %q, %q) {causal = true, scale = 0.25 : f64} : (tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>) -> (tensor<1x2x64x16xbf16>, tensor<1x2x64xf32>)
  %dq, %dk, %dv = "latch.attention_grad"(%q, %q, %q, %lse, %do, %lse) {causal = true, scale = 0.25 : f64} : (tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1x2x64xf32>, tensor<1x2x64x16xbf16>, tensor<1x2x64xf32>) -> (tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>)
  return %o, %dq : tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>
}
