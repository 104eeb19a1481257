// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a})' | FileCheck %s
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a}, latch-form-kernels, latch-kernels-to-ptx{chip=sm_90a})' --emit=ptx | FileCheck %s --check-prefix=PTX
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90})' | FileCheck %s --check-prefix=SM90
// On chip=sm_90a a bf16 contraction whose factors are both copied 16 bytes at a time takes
// the wgmma kernel: two warpgroups, k-tiles of 64 in four stages of 128-byte swizzled
// shared memory (the stages start at the first 1024-byte aligned address: the swizzle is a
// function of the address), cp.async copies waited for, fenced to the async proxy and met
// at one barrier per k-tile, four wgmma m64nNk16 per k-tile (here the weight gradient's
// MN-major operands: the transpose flags set), one group kept in flight.  The sums are
// added to the f32 output two columns per 8-byte load and store.  On sm_90 the same
// product keeps the mma.sync kernel.

#mAt = affine_map<(m, n, k) -> (k, m)>
#mB = affine_map<(m, n, k) -> (k, n)>
#mC = affine_map<(m, n, k) -> (m, n)>
// CHECK-LABEL: func.func @weight_gradient(
// CHECK: %[[SHARED:.*]] = arith.constant 132096 : i32
// CHECK: gpu.launch_func @latch_contract_0::@contract blocks in {{.*}} dynamic_shared_memory_size %[[SHARED]]
// CHECK-NOT: linalg.generic
// CHECK: gpu.module @latch_contract_0
// CHECK: gpu.dynamic_shared_memory
// CHECK: memref.extract_aligned_pointer_as_index
// CHECK: memref.view {{.*}} to memref<65536xbf16, #gpu.address_space<workgroup>>
// CHECK: scf.for {{.*}} -> (!llvm.struct<(f32,
// CHECK: nvgpu.device_async_copy {{.*}} 8 {bypassL1} : memref<384x128xbf16> to memref<65536xbf16, #gpu.address_space<workgroup>>
// CHECK: nvvm.cp.async.wait.group 1
// CHECK-NEXT: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT: gpu.barrier
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-COUNT-4: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 16>, D[<f32>, <one>, <wrapped>], A[<bf16>, <one>, <col>], B[<bf16>, <one>, <row>]
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK: scf.yield
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: vector.load {{.*}} {alignment = 8 : i64} : memref<128x128xf32>, vector<2xf32>
// CHECK-NEXT: arith.addf {{.*}} : vector<2xf32>
// CHECK-NEXT: vector.store {{.*}} {alignment = 8 : i64} : memref<128x128xf32>, vector<2xf32>
// PTX: .target sm_90a
// PTX: cp.async.cg.shared.global
// PTX: fence.proxy.async.shared::cta
// PTX: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// PTX: wgmma.wait_group.sync.aligned 1
// PTX: ld.global.v2.b32
// PTX: st.global.v2.b32
// SM90-LABEL: func.func @weight_gradient(
// SM90-NOT: wgmma
// SM90: nvvm.mma.sync
func.func @weight_gradient(%x: memref<384x128xbf16>, %dy: memref<384x128xbf16>, %dw: memref<128x128xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%dw : memref<128x128xf32>)
  linalg.generic {indexing_maps = [#mAt, #mB, #mC], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %dy : memref<384x128xbf16>, memref<384x128xbf16>) outs(%dw : memref<128x128xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %ae = arith.extf %a : bf16 to f32
    %be = arith.extf %b : bf16 to f32
    %p = arith.mulf %ae, %be : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
  return
}
