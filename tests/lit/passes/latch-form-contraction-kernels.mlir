// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels)' | FileCheck %s
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels{mma=false})' | FileCheck %s --check-prefix=SIMT
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels, latch-form-kernels, latch-kernels-to-ptx)' --emit=ptx | FileCheck %s --check-prefix=PTX
// Contractions on memrefs become launches of tiled kernels: bf16 operands (here an f32
// weight rounded to bf16 inside the body, as precision="bf16" fuses it) -> tensor cores
// (nvvm.mma.sync m16n8k16), f32 operands -> the SIMT kernel; anything else stays.

#mA = affine_map<(m, n, k) -> (m, k)>
#mBt = affine_map<(m, n, k) -> (n, k)>
#mC = affine_map<(m, n, k) -> (m, n)>
// CHECK-LABEL: func.func @linear_bf16(
// CHECK: gpu.launch_func @latch_contract_0::@contract blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in (%{{.*}}, %{{.*}}, %{{.*}}) args(%{{.*}} : memref<200x96xbf16>, %{{.*}} : memref<48x96xf32>, %{{.*}} : memref<200x48xf32>)
// CHECK-NOT: linalg.generic
// CHECK: gpu.module @latch_contract_0
// CHECK: gpu.func @contract({{.*}}) workgroup(%{{.*}} : memref<128x20xi32, #gpu.address_space<workgroup>>, %{{.*}} : memref<128x20xi32, #gpu.address_space<workgroup>>) kernel
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: nvvm.mma.sync
// CHECK-SAME: shape = #nvvm.shape<m = 16, n = 8, k = 16>
// SIMT-LABEL: func.func @linear_bf16(
// SIMT: gpu.launch_func @latch_contract_0::@contract
// SIMT-NOT: nvvm.mma.sync
// SIMT: math.fma
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
func.func @linear_bf16(%x: memref<200x96xbf16>, %w: memref<48x96xf32>, %y: memref<200x48xf32>) {
  linalg.generic {indexing_maps = [#mA, #mBt, #mC], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<200x96xbf16>, memref<48x96xf32>) outs(%y : memref<200x48xf32>) {
  ^bb0(%a: bf16, %b: f32, %acc: f32):
    %bt = arith.truncf %b : f32 to bf16
    %be = arith.extf %bt : bf16 to f32
    %ae = arith.extf %a : bf16 to f32
    %p = arith.mulf %ae, %be : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
  return
}

// -----
// A batched f32 product over two batch dimensions (attention scores) takes the SIMT kernel
// with the batch flattened into grid z.
#q = affine_map<(b, h, i, j, d) -> (b, h, i, d)>
#k = affine_map<(b, h, i, j, d) -> (b, h, j, d)>
#s = affine_map<(b, h, i, j, d) -> (b, h, i, j)>
// CHECK-LABEL: func.func @scores(
// CHECK-DAG: %[[Z:.*]] = arith.constant 6 : index
// CHECK: gpu.launch_func @latch_contract_0::@contract blocks in (%{{.*}}, %{{.*}}, %[[Z]])
// CHECK: gpu.func @contract
// CHECK-NOT: nvvm.mma.sync
// CHECK: math.fma
func.func @scores(%q: memref<2x3x40x16xf32>, %k: memref<2x3x40x16xf32>, %s: memref<2x3x40x40xf32>) {
  linalg.generic {indexing_maps = [#q, #k, #s], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : memref<2x3x40x16xf32>, memref<2x3x40x16xf32>) outs(%s : memref<2x3x40x40xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  }
  return
}

// -----
// Not a plain contraction (an extra op in the body): left for latch-form-kernels.
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
// CHECK-LABEL: func.func @not_plain(
// CHECK: linalg.generic
// CHECK-NOT: gpu.launch_func
func.func @not_plain(%x: memref<8x8xf32>, %w: memref<8x8xf32>, %y: memref<8x8xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<8x8xf32>, memref<8x8xf32>) outs(%y : memref<8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %e = math.exp %p : f32
    %r = arith.addf %acc, %e : f32
    linalg.yield %r : f32
  }
  return
}

// -----
// A one-hot dispatch (the dense form of index_add: out[j, c] += [slot[i] == j] * x[i, c]):
// the mask factor's tile is staged first, and a k-tile whose mask is all zero is skipped
// (no loads of the other factor, no FMAs) — bar.red.or publishes the tile and ORs the
// threads' "saw a one" flags in one barrier.
#d_hit = affine_map<(d0, d1, d2) -> (d2, d0)>
#d_val = affine_map<(d0, d1, d2) -> (d2, d1)>
#d_out = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @dispatch(
// CHECK: gpu.func @contract(
// CHECK: scf.for
// CHECK: memref.load %{{.*}} : memref<100x70xi8>
// CHECK: arith.uitofp
// CHECK: arith.cmpf une
// CHECK: %[[ANY:.*]] = nvvm.barrier #nvvm.reduction<or>
// CHECK: %[[TAKE:.*]] = arith.cmpi ne, %[[ANY]]
// CHECK: scf.if %[[TAKE]]
// CHECK: memref.load %{{.*}} : memref<100x48xf32>
// CHECK: math.fma
// CHECK: } else {
// CHECK-NEXT: scf.yield %{{.*}}
// PTX: bar.red.or.pred
func.func @dispatch(%hit8: memref<100x70xi8>, %v: memref<100x48xf32>, %o: memref<70x48xf32>) {
  linalg.generic {indexing_maps = [#d_hit, #d_val, #d_out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%hit8, %v : memref<100x70xi8>, memref<100x48xf32>) outs(%o : memref<70x48xf32>) {
  ^bb0(%h8: i8, %x: f32, %acc: f32):
    %h = arith.trunci %h8 : i8 to i1
    %f = arith.uitofp %h : i1 to f32
    %p = arith.mulf %f, %x : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
  return
}
