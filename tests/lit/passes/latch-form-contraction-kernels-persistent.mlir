// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a persistent=true})' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a persistent=true}, latch-form-kernels, latch-kernels-to-ptx{chip=sm_90a})' --emit=ptx | FileCheck %s --check-prefix=PTX
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a})' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a persistent=false})' | FileCheck %s --check-prefix=TILES
// latch-form-contraction-kernels{persistent=true}: a wgmma product of more than one wave
// of tiles (here 64 x 4 = 256 tiles of 128 x 256) runs as 132 blocks, one an SM, each
// walking tiles b, b + 132, ...  The block's first tile stages its prologue before its
// k-loop; every tile, once no warpgroup reads the stages any more (wait for the wgmma
// groups, then a barrier), stages the first k-tiles of the block's next tile, if it has
// one, and only then writes its own sums — so the next tile's pipeline fill overlaps this
// tile's epilogue.  The default; persistent=false: a block a tile.

#mA = affine_map<(m, n, k) -> (m, k)>
#mB = affine_map<(m, n, k) -> (n, k)>
#mC = affine_map<(m, n, k) -> (m, n)>
// CHECK-LABEL: func.func @forward(
// CHECK: %[[BLOCKS:.*]] = arith.constant 132 : index
// CHECK: gpu.launch_func @latch_contract_0::@contract blocks in (%[[BLOCKS]], %{{.*}}, %{{.*}})
// CHECK: gpu.module @latch_contract_0
// CHECK: %[[FIRST:.*]] = gpu.block_id x
// CHECK: scf.for %[[TILE:.*]] = %[[FIRST]] to %c256 step %c132 {
// CHECK: %[[IS_FIRST:.*]] = arith.cmpi eq, %[[TILE]], %[[FIRST]] : index
// CHECK-NEXT: scf.if %[[IS_FIRST]] {
// CHECK-COUNT-2: nvvm.cp.async.commit.group
// CHECK: scf.for {{.*}} -> (!llvm.struct<(f32,
// CHECK: nvvm.cp.async.wait.group 1
// CHECK: nvvm.wgmma.mma_async
// CHECK: nvvm.cp.async.commit.group
// CHECK: scf.yield
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: gpu.barrier
// CHECK-NEXT: %[[NEXT:.*]] = arith.addi %[[TILE]], %c132 : index
// CHECK-NEXT: %[[HAS_NEXT:.*]] = arith.cmpi ult, %[[NEXT]], %c256 : index
// CHECK-NEXT: scf.if %[[HAS_NEXT]] {
// CHECK-COUNT-2: nvvm.cp.async.commit.group
// CHECK: vector.load {{.*}} : memref<8192x1024xf32>, vector<2xf32>
// CHECK: gpu.return
// PTX: .target sm_90a
// PTX: wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16
// TILES-LABEL: func.func @forward(
// TILES: %[[N:.*]] = arith.constant 4 : index
// TILES: %[[M:.*]] = arith.constant 64 : index
// TILES: gpu.launch_func @latch_contract_0::@contract blocks in (%[[N]], %[[M]], %{{.*}})
// TILES-NOT: scf.for {{.*}} step %c132
func.func @forward(%x: memref<8192x128xbf16>, %w: memref<1024x128xbf16>, %y: memref<8192x1024xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%y : memref<8192x1024xf32>)
  linalg.generic {indexing_maps = [#mA, #mB, #mC], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<8192x128xbf16>, memref<1024x128xbf16>) outs(%y : memref<8192x1024xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %ae = arith.extf %a : bf16 to f32
    %be = arith.extf %b : bf16 to f32
    %p = arith.mulf %ae, %be : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
  return
}
