// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-attention-kernels{chip=sm_90a kv-split=2})' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-attention-kernels{chip=sm_90a})' | FileCheck %s --check-prefix=WHOLE
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-attention-kernels{chip=sm_90a kv-split=2 blocks-per-sm=4})' | FileCheck %s --check-prefix=OCC
// latch-form-attention-kernels{kv-split=2}: a causal forward of few blocks (here 4 query
// tiles x 2 heads) takes each query tile's key tiles in slices of at most 2, a block a
// (tile, head, slice).  Tiles of one slice (0 and 1) are finished by their first block as
// before; the others' blocks write their unnormalized output (f32 pairs), row maxima and
// row sums into a workspace of the function (one i8 allocation viewed three ways, rows of
// the split tiles only: 128 of 256), and a second launch combines the slices into the bf16
// output and the log-sum-exp.  Without the option: one launch, a block a query tile.
// CHECK-LABEL: func.func @main(
// CHECK: %[[WS:.*]] = memref.alloc() : memref<135168xi8>
// CHECK: %[[WO:.*]] = memref.view %[[WS]][%{{.*}}][] : memref<135168xi8> to memref<2x2x128x64xf32>
// CHECK: %[[WM:.*]] = memref.view %[[WS]][%{{.*}}][] : memref<135168xi8> to memref<2x2x128xf32>
// CHECK: %[[WL:.*]] = memref.view %[[WS]][%{{.*}}][] : memref<135168xi8> to memref<2x2x128xf32>
// CHECK: gpu.launch_func @latch_attention_0::@attention blocks in (%c4, %c2, %c2{{.*}}) {{.*}} args(%arg0 {{.*}}, %arg1 {{.*}}, %arg2 {{.*}}, %arg3 {{.*}}, %arg4 {{.*}}, %[[WO]] {{.*}}, %[[WM]] {{.*}}, %[[WL]] {{.*}})
// CHECK: gpu.launch_func @latch_attention_1::@combine {{.*}} args(%[[WO]] {{.*}}, %[[WM]] {{.*}}, %[[WL]] {{.*}}, %arg3 {{.*}}, %arg4 {{.*}})
// CHECK: gpu.func @attention(
// CHECK: %[[SLICE:.*]] = gpu.block_id z
// CHECK: nvvm.wgmma.mma_async
// CHECK: vector.store {{.*}} : memref<2x256x64xbf16>, vector<2xbf16>
// CHECK: } else {
// CHECK: vector.store {{.*}}, %arg5[%[[SLICE]], {{.*}}] {alignment = 8 : i64} : memref<2x2x128x64xf32>, vector<2xf32>
// CHECK: memref.store {{.*}}, %arg6[%[[SLICE]], {{.*}}] : memref<2x2x128xf32>
// CHECK: memref.store {{.*}}, %arg7[%[[SLICE]], {{.*}}] : memref<2x2x128xf32>
// CHECK: gpu.func @combine(
// CHECK-NOT: gpu.dynamic_shared_memory
// CHECK: arith.maximumf
// CHECK: math.exp2
// CHECK: vector.load {{.*}} : memref<2x2x128x64xf32>, vector<8xf32>
// CHECK: arith.truncf {{.*}} : vector<8xf32> to vector<8xbf16>
// CHECK: math.log
// blocks-per-sm=4: the flash kernel (49 KiB of shared memory: four fit an SM) declares
// four resident blocks; the combining kernel declares nothing.
// OCC: gpu.func @attention({{.*}}) kernel attributes {known_block_size = array<i32: 128, 1, 1>, nvvm.minctasm = 4 : i32}
// OCC: gpu.func @combine({{.*}}) kernel attributes {known_block_size = array<i32: {{[0-9]+}}, 1, 1>} {
// WHOLE-LABEL: func.func @main(
// WHOLE-NOT: memref.alloc
// WHOLE: gpu.launch_func @latch_attention_0::@attention
// WHOLE-NOT: gpu.launch_func
// WHOLE: gpu.module
func.func @main(%q: memref<2x256x64xbf16>, %k: memref<2x256x64xbf16>, %v: memref<2x256x64xbf16>, %o: memref<2x256x64xbf16>, %lse: memref<2x256xf32>) {
  "latch.attention"(%q, %k, %v, %o, %lse) {causal = true, scale = 0.125 : f64} : (memref<2x256x64xbf16>, memref<2x256x64xbf16>, memref<2x256x64xbf16>, memref<2x256x64xbf16>, memref<2x256xf32>) -> ()
  return
}
