// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a})' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a fill-past-factor=false})' | FileCheck %s --check-prefix=CLAMPED
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a}, latch-form-kernels, latch-kernels-to-ptx{chip=sm_90a})' --emit=ptx | FileCheck %s --check-prefix=PTX
// A router: 8 output columns in a 128-column tile.  The router weight's rows past its 8th
// are zero-filled by copies that read nothing (srcElements 0 where the row is past the
// factor) instead of 120 clamped copies of its last row per k-tile, from every block at
// once; the token rows (a whole number of tiles) keep plain copies.
// With fill-past-factor=false every copy is a plain 16-byte copy, as before.

#mA = affine_map<(m, n, k) -> (m, k)>
#mB = affine_map<(m, n, k) -> (n, k)>
#mC = affine_map<(m, n, k) -> (m, n)>
// CHECK-LABEL: func.func @router(
// CHECK: gpu.module @latch_contract_0
// CHECK: %[[N:.*]] = arith.select %{{.*}}, %c8, %c0 : index
// CHECK-NEXT: nvgpu.device_async_copy %{{.*}}, %{{.*}}, 8, %[[N]] {bypassL1} : memref<8x768xbf16>
// CHECK-NOT: nvgpu.device_async_copy {{.*}}, 8, %{{.*}} {bypassL1} : memref<256x768xbf16>
// CLAMPED-LABEL: func.func @router(
// CLAMPED-NOT: arith.select
// CLAMPED: nvgpu.device_async_copy {{.*}}, 8 {bypassL1} : memref<8x768xbf16>
// the first 32 tile rows' copies test their row; the other 96 rows' copies read nothing
// PTX: cp.async.cg.shared.global [%rd{{[0-9]+}}], [%rd{{[0-9]+}}], 16, %r{{[0-9]+}};
// PTX-NEXT: cp.async.cg.shared.global [%rd{{[0-9]+}}], [%rd{{[0-9]+}}], 16, 0;
func.func @router(%x: memref<256x768xbf16>, %w: memref<8x768xbf16>, %y: memref<256x8xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%y : memref<256x8xf32>)
  linalg.generic {indexing_maps = [#mA, #mB, #mC], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<256x768xbf16>, memref<8x768xbf16>) outs(%y : memref<256x8xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %ae = arith.extf %a : bf16 to f32
    %be = arith.extf %b : bf16 to f32
    %p = arith.mulf %ae, %be : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
  return
}
