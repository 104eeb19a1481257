// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-to-ptx)' --emit=ptx | FileCheck %s
// A cross-entropy-like gradient over bf16 logits that also reads an i64 vocabulary index
// and an f32 per-row value: vector lanes are set by the narrowest element (bf16: 8 lanes,
// one 16-byte access a thread), the i64 index is read as 64 bytes (LLVM splits it into four
// 16-byte loads), the bf16 result stored as 16 bytes.

// CHECK-LABEL: .visible .entry xent_grad_kernel(
// CHECK-DAG: ld.global.v4.b32
// CHECK-DAG: ld.global.v2.b64
// CHECK-DAG: ld.global.v2.b64
// CHECK-DAG: ld.global.v2.b64
// CHECK-DAG: ld.global.v2.b64
// CHECK-NOT: ld.global.v2.b32
// CHECK: st.global.v4.b32
#row = affine_map<(t, v) -> (t)>
#col = affine_map<(t, v) -> (v)>
#id = affine_map<(t, v) -> (t, v)>
func.func @xent_grad(%x: tensor<4x256xbf16>, %vocab: tensor<256xi64>, %label: tensor<4xi64>,
                     %m: tensor<4xf32>) -> tensor<4x256xbf16> {
  %e = tensor.empty() : tensor<4x256xbf16>
  %r = linalg.generic {indexing_maps = [#id, #col, #row, #row, #id],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x, %vocab, %label, %m : tensor<4x256xbf16>, tensor<256xi64>, tensor<4xi64>, tensor<4xf32>)
      outs(%e : tensor<4x256xbf16>) {
  ^bb0(%a: bf16, %k: i64, %l: i64, %mx: f32, %o: bf16):
    %af = arith.extf %a : bf16 to f32
    %s = arith.subf %af, %mx : f32
    %p = math.exp %s : f32
    %hit = arith.cmpi eq, %k, %l : i64
    %one = arith.uitofp %hit : i1 to f32
    %g = arith.subf %p, %one : f32
    %gb = arith.truncf %g : f32 to bf16
    linalg.yield %gb : bf16
  } -> tensor<4x256xbf16>
  return %r : tensor<4x256xbf16>
}
