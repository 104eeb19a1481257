// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a epilogue-readers=all epilogue-prefetch=true})' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a epilogue-readers=all})' | FileCheck %s --check-prefix=NOPREFETCH
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a epilogue-readers=none})' | FileCheck %s --check-prefix=APART
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a})' | FileCheck %s --check-prefix=APART
// The SwiGLU forward after its up product: the product (a wgmma kernel writing its output
// rounded to bf16 through shared memory) computes the elementwise op that reads it in its
// epilogue: the gate loaded at each thread's 8 elements (with epilogue-prefetch=true its
// tile's rows asked of L2 before the k-loop), silu(gate) * up stored; the
// product's own value is not stored (nothing reads it after).  With
// epilogue-readers=none, and by default here (a one-block grid: see
// latch-epilogue-readers-policy.mlir), the op stays, a generic of its own after the launch.

#mA = affine_map<(m, n, k) -> (m, k)>
#mB = affine_map<(m, n, k) -> (n, k)>
#mC = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(m, n) -> (m, n)>
// CHECK-LABEL: func.func @swiglu_forward(
// CHECK-SAME: %[[X:.*]]: memref<128x64xbf16>, %[[W:.*]]: memref<256x64xbf16>, %[[GATE:.*]]: memref<128x256xbf16>, %[[H:.*]]: memref<128x256xbf16>)
// CHECK: gpu.launch_func @latch_contract_0::@contract {{.*}} args(%[[X]] : memref<128x64xbf16>, %[[W]] : memref<256x64xbf16>, %{{.*}} : memref<128x256xbf16>, %[[GATE]] : memref<128x256xbf16>, %[[H]] : memref<128x256xbf16>)
// CHECK-NOT: linalg.generic
// CHECK: gpu.module @latch_contract_0
// CHECK: gpu.func @contract(%{{.*}}: memref<128x64xbf16>, %{{.*}}: memref<256x64xbf16>, %[[C:.*]]: memref<128x256xbf16>, %[[XG:.*]]: memref<128x256xbf16>, %[[XH:.*]]: memref<128x256xbf16>)
// CHECK: memref.extract_aligned_pointer_as_index %[[XG]]
// CHECK: nvvm.cp.async.bulk.prefetch %{{.*}}, %{{.*}} : <1>
// CHECK: scf.for
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NOT: vector.store {{.*}}, %[[C]]
// CHECK: vector.load %[[XG]]
// CHECK: math.exp
// CHECK: vector.store {{.*}}, %[[XH]]
// NOPREFETCH: gpu.func @contract(
// NOPREFETCH-NOT: cp.async.bulk.prefetch
// NOPREFETCH: math.exp
// APART-LABEL: func.func @swiglu_forward(
// APART: gpu.launch_func @latch_contract_0::@contract
// APART: linalg.generic
// APART: math.exp
// APART-NOT: math.exp
// APART: gpu.module @latch_contract_0
// APART-NOT: math.exp
// APART: gpu.return
func.func @swiglu_forward(%x: memref<128x64xbf16>, %w: memref<256x64xbf16>,
                          %gate: memref<128x256xbf16>, %h: memref<128x256xbf16>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %p = memref.alloc() : memref<128x256xf32>
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]}
      outs(%p : memref<128x256xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#mA, #mB, #mC], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<128x64xbf16>, memref<256x64xbf16>) outs(%p : memref<128x256xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %ae = arith.extf %a : bf16 to f32
    %be = arith.extf %b : bf16 to f32
    %m = arith.mulf %ae, %be : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %up = memref.alloc() : memref<128x256xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p : memref<128x256xf32>) outs(%up : memref<128x256xbf16>) {
  ^bb0(%v: f32, %o: bf16):
    %r = arith.truncf %v : f32 to bf16
    linalg.yield %r : bf16
  }
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%gate, %up : memref<128x256xbf16>, memref<128x256xbf16>) outs(%h : memref<128x256xbf16>) {
  ^bb0(%g: bf16, %u: bf16, %o: bf16):
    %ge = arith.extf %g : bf16 to f32
    %n = arith.negf %ge : f32
    %e = math.exp %n : f32
    %d = arith.addf %e, %one : f32
    %sg = arith.divf %ge, %d : f32
    %sr = arith.truncf %sg : f32 to bf16
    %y = arith.mulf %sr, %u : bf16
    linalg.yield %y : bf16
  }
  return
}
