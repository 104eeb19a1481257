// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels)' | FileCheck %s
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels{mma=false})' | FileCheck %s --check-prefix=SIMT
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels, latch-form-kernels, latch-kernels-to-ptx)' --emit=ptx | FileCheck %s --check-prefix=PTX
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels{scatter=false})' | FileCheck %s --check-prefix=NOSCATTER
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels{gather=false})' | FileCheck %s --check-prefix=ATOMIC
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels{gather=false}, latch-form-kernels, latch-kernels-to-ptx)' --emit=ptx | FileCheck %s --check-prefix=ATOMICPTX
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels{deterministic=true})' | FileCheck %s --check-prefix=FIXED
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels{deterministic=true}, latch-form-kernels, latch-kernels-to-ptx)' --emit=ptx | FileCheck %s --check-prefix=FIXEDPTX
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-form-contraction-kernels{gather-walk=last})' | FileCheck %s --check-prefix=INLAUNCH
// Contractions on memrefs become launches of tiled kernels: bf16 operands (here an f32
// weight rounded to bf16 inside the body, as precision="bf16" fuses it) -> tensor cores
// (nvvm.mma.sync m16n8k16), f32 operands -> the SIMT kernel; anything else stays.  The
// k-tiles pass through four stages in dynamic shared memory (80 KiB here, above the 48 KiB
// a kernel may declare statically): a bf16 operand read as it is along k (x here) is
// copied 16 bytes at a time by cp.async, an f32 one rounded to bf16 in the body (the
// weight) is loaded 8 elements at a time, rounded and stored by the threads; fragments are
// read with ldmatrix.  The output's initial value is
// read and added to (nothing zeroed it here), two columns per 8-byte load and store.
// x's 200 rows end inside their second 128-row tile: its copies carry a srcElements count
// (8, or 0 past row 199: zero-filled, nothing read) instead of re-reading the last row.

#mA = affine_map<(m, n, k) -> (m, k)>
#mBt = affine_map<(m, n, k) -> (n, k)>
#mC = affine_map<(m, n, k) -> (m, n)>
// CHECK-LABEL: func.func @linear_bf16(
// CHECK: %[[SHARED:.*]] = arith.constant 81920 : i32
// CHECK: gpu.launch_func @latch_contract_0::@contract blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in (%{{.*}}, %{{.*}}, %{{.*}}) dynamic_shared_memory_size %[[SHARED]] args(%{{.*}} : memref<200x96xbf16>, %{{.*}} : memref<48x96xf32>, %{{.*}} : memref<200x48xf32>)
// CHECK-NOT: linalg.generic
// CHECK: gpu.module @latch_contract_0
// CHECK: gpu.func @contract({{.*}}) kernel
// CHECK: %[[DYN:.*]] = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// CHECK: memref.view %[[DYN]][%{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<4x128x40xbf16, #gpu.address_space<workgroup>>
// CHECK: memref.view %[[DYN]][%{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<4x128x40xbf16, #gpu.address_space<workgroup>>
// CHECK: scf.for
// CHECK: scf.if
// CHECK: nvgpu.device_async_copy %{{.*}}, 8, %{{.*}} {bypassL1} : memref<200x96xbf16> to memref<4x128x40xbf16, #gpu.address_space<workgroup>>
// CHECK: vector.load %{{.*}} {alignment = 16 : i64} : memref<48x96xf32>, vector<8xf32>
// CHECK: arith.truncf %{{.*}} : vector<8xf32> to vector<8xbf16>
// CHECK: vector.store %{{.*}} {alignment = 16 : i64} : memref<4x128x40xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.cp.async.wait.group 2
// CHECK-NEXT: gpu.barrier
// CHECK: nvgpu.ldmatrix %{{.*}} {numTiles = 4 : i32, transpose = false}
// CHECK: nvvm.mma.sync
// CHECK-SAME: shape = #nvvm.shape<m = 16, n = 8, k = 16>
// CHECK-NOT: gpu.barrier
// CHECK: scf.yield
// CHECK: vector.load %{{.*}} {alignment = 8 : i64} : memref<200x48xf32>, vector<2xf32>
// CHECK: arith.addf %{{.*}} : vector<2xf32>
// CHECK: vector.store %{{.*}} {alignment = 8 : i64} : memref<200x48xf32>, vector<2xf32>
// SIMT-LABEL: func.func @linear_bf16(
// SIMT: gpu.launch_func @latch_contract_0::@contract
// SIMT-NOT: nvvm.mma.sync
// SIMT: math.fma
// PTX: .shared .align 16 .b8
// PTX-DAG: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// PTX-DAG: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX-DAG: cp.async.cg.shared.global
// PTX-DAG: cp.async.commit_group
// PTX-DAG: cp.async.wait_group 2
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
// A weight gradient dW[n, m] = sum_t dy[t, n] * x[t, m] into a buffer just zeroed: both
// bf16 operands are contiguous along their rows, not along k (the tokens): cp.async copies
// [k][rows] tiles and ldmatrix reads them transposed; the zero fill goes and the kernel
// stores its sums without reading the output.
#gx = affine_map<(n, m, t) -> (t, m)>
#gy = affine_map<(n, m, t) -> (t, n)>
#gw = affine_map<(n, m, t) -> (n, m)>
#id = affine_map<(n, m) -> (n, m)>
#sc = affine_map<(n, m) -> ()>
// CHECK-LABEL: func.func @weight_grad(
// CHECK-NOT: linalg.generic
// CHECK: gpu.launch_func
// CHECK: gpu.func @contract(
// CHECK: memref.view %{{.*}} to memref<4x32x136xbf16, #gpu.address_space<workgroup>>
// CHECK: nvgpu.device_async_copy %{{.*}}, 8, %{{.*}} {bypassL1} : memref<64x64xbf16> to memref<4x32x136xbf16, #gpu.address_space<workgroup>>
// CHECK: nvgpu.device_async_copy %{{.*}}, 8, %{{.*}} {bypassL1} : memref<64x96xbf16> to memref<4x32x136xbf16, #gpu.address_space<workgroup>>
// CHECK: nvgpu.ldmatrix %{{.*}} {numTiles = 4 : i32, transpose = true}
// CHECK: nvvm.mma.sync
// CHECK: scf.yield
// CHECK-NOT: memref.load
// CHECK: vector.store %{{.*}} {alignment = 8 : i64} : memref<64x96xf32>, vector<2xf32>
// CHECK-NOT: memref.load
// CHECK: gpu.return
// PTX: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
func.func @weight_grad(%dy: memref<64x64xbf16>, %x: memref<64x96xbf16>) -> memref<64x96xf32> {
  %zero = arith.constant 0.0 : f32
  %dw = memref.alloc() : memref<64x96xf32>
  linalg.generic {indexing_maps = [#sc, #id], iterator_types = ["parallel", "parallel"]}
      ins(%zero : f32) outs(%dw : memref<64x96xf32>) {
  ^bb0(%z: f32, %o: f32):
    linalg.yield %z : f32
  }
  linalg.generic {indexing_maps = [#gy, #gx, #gw], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%dy, %x : memref<64x64xbf16>, memref<64x96xbf16>) outs(%dw : memref<64x96xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %ae = arith.extf %a : bf16 to f32
    %be = arith.extf %b : bf16 to f32
    %p = arith.mulf %ae, %be : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
  return %dw : memref<64x96xf32>
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

// -----
// A one-hot product whose mask comes from a buffer: a [rows, sources] matrix materialized
// (through a reshape) by an all-parallel generic yielding [tok[k] == row] — the last write
// of that buffer before the contraction.  That is a scatter, out[tok[k], n] += v[k, n],
// and the mask generic, now unread, is erased.  By default it is a gather
// (passes/one_hot_gather.py): in a (70 + 2 + 70*4 + 100 + 70)-i32 workspace, zero the
// counts; group the sources by row (an integer atomic add hands out a row's slots);
// one thread per four consecutive output elements (16 bytes, one vector store) sums its
// row's slotted sources in ascending k (a min/max sorting network; each source's four
// elements one vector load) onto %o — a heavy row's by float atomics; then a launch of 264
// blocks walks the overflow list with float atomics.  INLAUNCH (gather-walk=last): the same
// launch's last 264 blocks walk it.
// In @rewritten the buffer is overwritten after the mask generic, so nothing is known and
// the kernel is the plain one.
#c_hit = affine_map<(d0, d1, d2) -> (d0, d2)>
#c_val = affine_map<(d0, d1, d2) -> (d2, d1)>
#c_out = affine_map<(d0, d1, d2) -> (d0, d1)>
#c_id = affine_map<(d0, d1) -> (d0, d1)>
#c_col = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @combine(
// CHECK: memref.alloc() : memref<2088xi8>
// CHECK-NOT: linalg.generic
// CHECK: %[[COUNTS:.*]] = memref.view {{.*}} to memref<72xi32>
// CHECK: %[[TABLE:.*]] = memref.view {{.*}} to memref<280xi32>
// CHECK: gpu.launch
// CHECK: memref.store %{{.*}}, %[[COUNTS]]
// CHECK: gpu.launch
// CHECK: %[[T:.*]] = memref.load %arg0[%{{.*}}] : memref<100xi64>
// CHECK: memref.atomic_rmw addi %{{.*}}, %[[COUNTS]]
// CHECK: memref.store %{{.*}}, %[[TABLE]]
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %c4,
// CHECK: memref.load %[[COUNTS]]
// CHECK-COUNT-4: memref.load %[[TABLE]]
// CHECK: arith.minsi
// CHECK: scf.if
// CHECK: vector.load %arg1[{{.*}}] {alignment = 16 : i64} : memref<100x48xf32>, vector<4xf32>
// CHECK: vector.store %{{.*}}, %arg2[{{.*}}] {alignment = 16 : i64} : memref<70x48xf32>, vector<4xf32>
// CHECK: memref.atomic_rmw addf %{{.*}}, %arg2[
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %c264,
// CHECK: scf.for
// CHECK: scf.for
// CHECK: memref.atomic_rmw addf %{{.*}}, %arg2[
// CHECK-NOT: gpu.launch
// CHECK-NOT: latch_contract
// CHECK: return
// INLAUNCH-LABEL: func.func @combine(
// INLAUNCH: memref.alloc() : memref<2088xi8>
// INLAUNCH-NOT: linalg.generic
// INLAUNCH: %[[COUNTS:.*]] = memref.view {{.*}} to memref<72xi32>
// INLAUNCH: %[[TABLE:.*]] = memref.view {{.*}} to memref<280xi32>
// INLAUNCH: gpu.launch
// INLAUNCH: memref.store %{{.*}}, %[[COUNTS]]
// INLAUNCH: gpu.launch
// INLAUNCH: %[[T:.*]] = memref.load %arg0[%{{.*}}] : memref<100xi64>
// INLAUNCH: memref.atomic_rmw addi %{{.*}}, %[[COUNTS]]
// INLAUNCH: memref.store %{{.*}}, %[[TABLE]]
// INLAUNCH: gpu.launch blocks({{.*}}) in ({{.*}} = %c268,
// INLAUNCH: memref.load %[[COUNTS]]
// INLAUNCH-COUNT-4: memref.load %[[TABLE]]
// INLAUNCH: arith.minsi
// INLAUNCH: scf.if
// INLAUNCH: vector.load %arg1[{{.*}}] {alignment = 16 : i64} : memref<100x48xf32>, vector<4xf32>
// INLAUNCH: vector.store %{{.*}}, %arg2[{{.*}}] {alignment = 16 : i64} : memref<70x48xf32>, vector<4xf32>
// INLAUNCH: memref.atomic_rmw addf %{{.*}}, %arg2[
// INLAUNCH: scf.for
// INLAUNCH: scf.for
// INLAUNCH: memref.atomic_rmw addf %{{.*}}, %arg2[
// INLAUNCH-NOT: gpu.launch
// INLAUNCH-NOT: latch_contract
// INLAUNCH: return
// PTX-LABEL: .entry combine_kernel(
// PTX: {{(atom|red)}}.global.add.u32
// With gather=false: one thread per (k, four consecutive n) adds with four consecutive
// atomics (skipped when tok[k] is out of range), which latch-vector-atomics makes one
// red.global.add.v4.f32.
// ATOMIC-LABEL: func.func @combine(
// ATOMIC-NOT: linalg.generic
// ATOMIC: gpu.launch blocks({{.*}}) in ({{.*}} = %c5, {{.*}}) threads({{.*}}) in ({{.*}} = %c256,
// ATOMIC: %[[N4:.*]] = arith.remui %{{.*}}, %c12
// ATOMIC: %[[N:.*]] = arith.muli %[[N4]], %c4
// ATOMIC: %[[T:.*]] = memref.load %arg0[%{{.*}}] : memref<100xi64>
// ATOMIC: arith.cmpi sge, %[[T]]
// ATOMIC: arith.cmpi slt, %[[T]]
// ATOMIC: scf.if
// ATOMIC: %[[ROW:.*]] = arith.index_cast %[[T]] : i64 to index
// ATOMIC: %[[V:.*]] = memref.load %arg1[%{{.*}}, %[[N]]]
// ATOMIC: %[[N3:.*]] = arith.addi %[[N]], %c3
// ATOMIC: %[[V3:.*]] = memref.load %arg1[%{{.*}}, %[[N3]]]
// ATOMIC-NEXT: memref.atomic_rmw addf %[[V]], %arg2[%[[ROW]], %[[N]]]
// ATOMIC-NEXT: memref.atomic_rmw addf
// ATOMIC-NEXT: memref.atomic_rmw addf
// ATOMIC-NEXT: memref.atomic_rmw addf %[[V3]], %arg2[%[[ROW]], %[[N3]]]
// ATOMICPTX-LABEL: .entry combine_kernel(
// ATOMICPTX-NOT: atom.global
// ATOMICPTX: red.global.add.v4.f32
// ATOMICPTX-NOT: atom.global
// ATOMICPTX: ret;
// NOSCATTER-LABEL: func.func @combine(
// NOSCATTER-NOT: memref.atomic_rmw
// NOSCATTER: gpu.launch_func @latch_contract_0::@contract
// With deterministic=true the scatter sums in fixed point (passes/fixed_point_scatter.py):
// a 70*48*12-byte workspace; zero it, an atomic max of |v|'s bits per element, integer
// adds of v scaled to that bound, then one thread per element adds the sum to %o.
// FIXED-LABEL: func.func @combine(
// FIXED: memref.alloc() : memref<40320xi8>
// FIXED-NOT: atomic_rmw addf
// FIXED: memref.view {{.*}} to memref<70x48xi32>
// FIXED: memref.view {{.*}} to memref<70x48xi64>
// FIXED: gpu.launch
// FIXED: memref.store
// FIXED: gpu.launch
// FIXED: memref.atomic_rmw maxs
// FIXED: gpu.launch
// FIXED: memref.atomic_rmw addi
// FIXED: gpu.launch
// FIXED: arith.sitofp {{.*}} : i64 to f64
// FIXED: memref.store {{.*}}, %arg2[
// FIXED-NOT: latch_contract
// FIXED: return
// FIXEDPTX-NOT: atom.global.add.f32
// FIXEDPTX-NOT: red.global.add{{.*}}.f32
// FIXEDPTX: {{(atom|red)}}.global.max.s32
// FIXEDPTX: {{(atom|red)}}.global.add.u64
func.func @combine(%tok: memref<100xi64>, %v: memref<100x48xf32>, %o: memref<70x48xf32>) {
  %h = memref.alloc() : memref<7000xf32>
  %h2 = memref.expand_shape %h [[0, 1]] output_shape [70, 100] : memref<7000xf32> into memref<70x100xf32>
  linalg.generic {indexing_maps = [#c_col, #c_id], iterator_types = ["parallel", "parallel"]}
      ins(%tok : memref<100xi64>) outs(%h2 : memref<70x100xf32>) {
  ^bb0(%t: i64, %x: f32):
    %r = linalg.index 0 : index
    %ri = arith.index_cast %r : index to i64
    %c = arith.cmpi eq, %t, %ri : i64
    %f = arith.uitofp %c : i1 to f32
    linalg.yield %f : f32
  }
  linalg.generic {indexing_maps = [#c_hit, #c_val, #c_out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%h2, %v : memref<70x100xf32>, memref<100x48xf32>) outs(%o : memref<70x48xf32>) {
  ^bb0(%p: f32, %x: f32, %acc: f32):
    %m = arith.mulf %p, %x : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----
#c_hit = affine_map<(d0, d1, d2) -> (d0, d2)>
#c_val = affine_map<(d0, d1, d2) -> (d2, d1)>
#c_out = affine_map<(d0, d1, d2) -> (d0, d1)>
#c_id = affine_map<(d0, d1) -> (d0, d1)>
#c_col = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @rewritten(
// CHECK: gpu.func @contract(
// CHECK-NOT: nvvm.barrier
// CHECK: gpu.return
func.func @rewritten(%tok: memref<100xi64>, %v: memref<100x48xf32>, %o: memref<70x48xf32>) {
  %h = memref.alloc() : memref<7000xf32>
  %h2 = memref.expand_shape %h [[0, 1]] output_shape [70, 100] : memref<7000xf32> into memref<70x100xf32>
  linalg.generic {indexing_maps = [#c_col, #c_id], iterator_types = ["parallel", "parallel"]}
      ins(%tok : memref<100xi64>) outs(%h2 : memref<70x100xf32>) {
  ^bb0(%t: i64, %x: f32):
    %r = linalg.index 0 : index
    %ri = arith.index_cast %r : index to i64
    %c = arith.cmpi eq, %t, %ri : i64
    %f = arith.uitofp %c : i1 to f32
    linalg.yield %f : f32
  }
  %two = arith.constant 2.0 : f32
  %c3 = arith.constant 3 : index
  memref.store %two, %h[%c3] : memref<7000xf32>
  linalg.generic {indexing_maps = [#c_hit, #c_val, #c_out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%h2, %v : memref<70x100xf32>, memref<100x48xf32>) outs(%o : memref<70x48xf32>) {
  ^bb0(%p: f32, %x: f32, %acc: f32):
    %m = arith.mulf %p, %x : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----
// Split-K: a router weight gradient [768, 8] summed over 2048 tokens has 6 output tiles,
// far too few for 132 SMs, so each tile's 64 k-tiles are split into 16 slices of 4 (grid
// z = 16): slice s stores its partial sums into workspace[s] and a generic adds the 16
// slices, in order, to the output (deterministic; no atomics).  The workspace is a view of
// one allocation per function, sized for the largest split.
#s_a = affine_map<(d0, d1, d2) -> (d2, d0)>
#s_b = affine_map<(d0, d1, d2) -> (d2, d1)>
#s_o = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-DAG: #[[W:.*]] = affine_map<(d0, d1, d2) -> (d2, d1, d0)>
// CHECK-DAG: #[[O:.*]] = affine_map<(d0, d1, d2) -> (d1, d0)>
// CHECK-LABEL: func.func @router_wgrad(
// CHECK: %[[BYTES:.*]] = memref.alloc() : memref<393216xi8>
// CHECK: %[[WS:.*]] = memref.view %[[BYTES]][%{{.*}}][] : memref<393216xi8> to memref<16x768x8xf32>
// CHECK: %[[C16:.*]] = arith.constant 16 : index
// CHECK: gpu.launch_func @latch_contract_0::@contract blocks in (%{{.*}}, %{{.*}}, %[[C16]]) {{.*}} args({{.*}}, %[[WS]] : memref<16x768x8xf32>)
// CHECK: linalg.generic {indexing_maps = [#[[W]], #[[O]]], iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[WS]] : memref<16x768x8xf32>) outs(%arg2 : memref<768x8xf32>)
// CHECK: gpu.func @contract(
// CHECK: %[[S:.*]] = arith.remui %{{.*}}, %{{.*}} : index
// CHECK: scf.for
// CHECK: vector.store %{{.*}}, %{{.*}}[%[[S]], %{{.*}}, %{{.*}}] {alignment = 8 : i64} : memref<16x768x8xf32>, vector<2xf32>
func.func @router_wgrad(%x: memref<2048x768xbf16>, %g: memref<2048x8xbf16>, %w: memref<768x8xf32>) {
  linalg.generic {indexing_maps = [#s_a, #s_b, #s_o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %g : memref<2048x768xbf16>, memref<2048x8xbf16>) outs(%w : memref<768x8xf32>) {
  ^bb0(%p: bf16, %q: bf16, %acc: f32):
    %pf = arith.extf %p : bf16 to f32
    %qf = arith.extf %q : bf16 to f32
    %m = arith.mulf %pf, %qf : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----
// The embedding gradient: out[vocab, d] += [ids[k] == arange[vocab]] * g[k, d], the mask
// computed in the body against an arange buffer: a scatter as well.
#e_ids = affine_map<(v, d, k) -> (k)>
#e_ar = affine_map<(v, d, k) -> (v)>
#e_g = affine_map<(v, d, k) -> (k, d)>
#e_o = affine_map<(v, d, k) -> (v, d)>
#e_1 = affine_map<(i) -> (i)>
// CHECK-LABEL: func.func @embedding_grad(
// CHECK: memref.load %arg0[%{{.*}}] : memref<64xi64>
// CHECK: memref.atomic_rmw addf
// CHECK-NOT: latch_contract
func.func @embedding_grad(%ids: memref<64xi64>, %g: memref<64x32xf32>, %o: memref<500x32xf32>) {
  %ar = memref.alloc() : memref<500xi64>
  linalg.generic {indexing_maps = [#e_1], iterator_types = ["parallel"]} outs(%ar : memref<500xi64>) {
  ^bb0(%x: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  }
  linalg.generic {indexing_maps = [#e_ids, #e_ar, #e_g, #e_o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%ids, %ar, %g : memref<64xi64>, memref<500xi64>, memref<64x32xf32>) outs(%o : memref<500x32xf32>) {
  ^bb0(%t: i64, %v: i64, %x: f32, %acc: f32):
    %h = arith.cmpi eq, %t, %v : i64
    %f = arith.uitofp %h : i1 to f32
    %p = arith.mulf %f, %x : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
  return
}

// -----
// The scatter recomputes t(k) from the mask writer's inputs at the contraction; when one of
// them (tok) is written in between — bufferization reuses buffers — that would read the new
// data, so the product stays a (mask-skipping) contraction.
#u_hit = affine_map<(d0, d1, d2) -> (d0, d2)>
#u_val = affine_map<(d0, d1, d2) -> (d2, d1)>
#u_out = affine_map<(d0, d1, d2) -> (d0, d1)>
#u_id = affine_map<(d0, d1) -> (d0, d1)>
#u_col = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @source_overwritten(
// CHECK-NOT: memref.atomic_rmw
// CHECK: gpu.launch_func @latch_contract_0::@contract
// CHECK: nvvm.barrier #nvvm.reduction<or>
func.func @source_overwritten(%tok: memref<100xi64>, %v: memref<100x48xf32>, %o: memref<70x48xf32>) {
  %h = memref.alloc() : memref<70x100xf32>
  linalg.generic {indexing_maps = [#u_col, #u_id], iterator_types = ["parallel", "parallel"]}
      ins(%tok : memref<100xi64>) outs(%h : memref<70x100xf32>) {
  ^bb0(%t: i64, %x: f32):
    %r = linalg.index 0 : index
    %ri = arith.index_cast %r : index to i64
    %c = arith.cmpi eq, %t, %ri : i64
    %f = arith.uitofp %c : i1 to f32
    linalg.yield %f : f32
  }
  %seven = arith.constant 7 : i64
  %c3 = arith.constant 3 : index
  memref.store %seven, %tok[%c3] : memref<100xi64>
  linalg.generic {indexing_maps = [#u_hit, #u_val, #u_out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%h, %v : memref<70x100xf32>, memref<100x48xf32>) outs(%o : memref<70x48xf32>) {
  ^bb0(%p: f32, %x: f32, %acc: f32):
    %m = arith.mulf %p, %x : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----
// The gradient of x[tok] when x is [batch, seq, d]: rows of the output are tokens read as
// (batch, seq), and the mask, computed in the body, compares tok[k] with an arange over all
// tokens viewed as [batch, seq].  A scatter whose target tok[k] is split back into
// (tok / seq, tok % seq) and bounded by batch * seq.
#r_tok = affine_map<(b, s, n, k) -> (k)>
#r_ar = affine_map<(b, s, n, k) -> (b, s)>
#r_val = affine_map<(b, s, n, k) -> (k, n)>
#r_out = affine_map<(b, s, n, k) -> (b, s, n)>
#r_1 = affine_map<(i) -> (i)>
// CHECK-LABEL: func.func @rows_reshaped(
// CHECK: arith.cmpi slt, %{{.*}}, %c24_i64
// CHECK: memref.atomic_rmw addi
// CHECK: arith.minsi
// ATOMIC-LABEL: func.func @rows_reshaped(
// ATOMIC: %[[T:.*]] = memref.load %arg0[%{{.*}}] : memref<100xi64>
// ATOMIC: arith.cmpi slt, %[[T]], %c24_i64
// ATOMIC: %[[ROW:.*]] = arith.index_cast %[[T]] : i64 to index
// ATOMIC: %[[S:.*]] = arith.remui %[[ROW]], %c8
// ATOMIC: %[[B:.*]] = arith.divui %[[ROW]], %c8
// ATOMIC: memref.atomic_rmw addf %{{.*}}, %arg2[%[[B]], %[[S]], %{{.*}}]
func.func @rows_reshaped(%tok: memref<100xi64>, %v: memref<100x16xf32>, %o: memref<3x8x16xf32>) {
  %ar = memref.alloc() : memref<24xi64>
  linalg.generic {indexing_maps = [#r_1], iterator_types = ["parallel"]} outs(%ar : memref<24xi64>) {
  ^bb0(%x: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  }
  %ar2 = memref.expand_shape %ar [[0, 1]] output_shape [3, 8] : memref<24xi64> into memref<3x8xi64>
  linalg.generic {indexing_maps = [#r_tok, #r_ar, #r_val, #r_out], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%tok, %ar2, %v : memref<100xi64>, memref<3x8xi64>, memref<100x16xf32>) outs(%o : memref<3x8x16xf32>) {
  ^bb0(%t: i64, %r: i64, %x: f32, %acc: f32):
    %h = arith.cmpi eq, %t, %r : i64
    %f = arith.uitofp %h : i1 to f32
    %p = arith.mulf %f, %x : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
  return
}

// -----
// A bf16 program's mask: the comparison becomes a bf16 0/1 and is widened to f32 before the
// product (exact), still a one-hot factor: a scatter.
#w_tok = affine_map<(r, n, k) -> (k)>
#w_ar = affine_map<(r, n, k) -> (r)>
#w_val = affine_map<(r, n, k) -> (k, n)>
#w_out = affine_map<(r, n, k) -> (r, n)>
#w_1 = affine_map<(i) -> (i)>
// CHECK-LABEL: func.func @widened_mask(
// CHECK: memref.atomic_rmw addf
// CHECK-NOT: latch_contract
func.func @widened_mask(%tok: memref<64xi64>, %v: memref<64x32xbf16>, %o: memref<50x32xf32>) {
  %ar = memref.alloc() : memref<50xi64>
  linalg.generic {indexing_maps = [#w_1], iterator_types = ["parallel"]} outs(%ar : memref<50xi64>) {
  ^bb0(%x: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  }
  linalg.generic {indexing_maps = [#w_tok, #w_ar, #w_val, #w_out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%tok, %ar, %v : memref<64xi64>, memref<50xi64>, memref<64x32xbf16>) outs(%o : memref<50x32xf32>) {
  ^bb0(%t: i64, %r: i64, %x: bf16, %acc: f32):
    %h = arith.cmpi eq, %t, %r : i64
    %f = arith.uitofp %h : i1 to bf16
    %fw = arith.extf %f : bf16 to f32
    %xw = arith.extf %x : bf16 to f32
    %p = arith.mulf %fw, %xw : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
  return
}

// -----
// After the memory plan, another allocation may share the bytes of the mask writer's input
// once that input is dead: here %other (planned at the same offset as %tok) is written
// between the mask writer and the contraction, so recomputing tok[k] there would read the
// new data.  The product stays a (mask-skipping) contraction.
#p_hit = affine_map<(d0, d1, d2) -> (d0, d2)>
#p_val = affine_map<(d0, d1, d2) -> (d2, d1)>
#p_out = affine_map<(d0, d1, d2) -> (d0, d1)>
#p_id = affine_map<(d0, d1) -> (d0, d1)>
#p_col = affine_map<(d0, d1) -> (d1)>
#p_1 = affine_map<(i) -> (i)>
// CHECK-LABEL: func.func @planned_alias(
// CHECK-NOT: memref.atomic_rmw
// CHECK: gpu.launch_func @latch_contract_0::@contract
func.func @planned_alias(%src: memref<100xi64>, %v: memref<100x48xf32>, %o: memref<70x48xf32>) {
  %tok = memref.alloc() {latch.offset = 0 : i64} : memref<100xi64>
  memref.copy %src, %tok : memref<100xi64> to memref<100xi64>
  %h = memref.alloc() {latch.offset = 1024 : i64} : memref<70x100xf32>
  linalg.generic {indexing_maps = [#p_col, #p_id], iterator_types = ["parallel", "parallel"]}
      ins(%tok : memref<100xi64>) outs(%h : memref<70x100xf32>) {
  ^bb0(%t: i64, %x: f32):
    %r = linalg.index 0 : index
    %ri = arith.index_cast %r : index to i64
    %c = arith.cmpi eq, %t, %ri : i64
    %f = arith.uitofp %c : i1 to f32
    linalg.yield %f : f32
  }
  %other = memref.alloc() {latch.offset = 512 : i64} : memref<64xi64>
  linalg.generic {indexing_maps = [#p_1], iterator_types = ["parallel"]} outs(%other : memref<64xi64>) {
  ^bb0(%x: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  }
  linalg.generic {indexing_maps = [#p_hit, #p_val, #p_out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%h, %v : memref<70x100xf32>, memref<100x48xf32>) outs(%o : memref<70x48xf32>) {
  ^bb0(%p: f32, %x: f32, %acc: f32):
    %m = arith.mulf %p, %x : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----
// The same after elementwise fusion folded the arange into the body: the row coordinate is
// an affine.apply linearizing the two row loops' indices.  Still the scatter.
#l_tok = affine_map<(b, s, n, k) -> (k)>
#l_val = affine_map<(b, s, n, k) -> (k, n)>
#l_out = affine_map<(b, s, n, k) -> (b, s, n)>
#l_lin = affine_map<()[s0, s1] -> (s0 + s1 * 8)>
// CHECK-LABEL: func.func @rows_linearized(
// CHECK: %[[T:.*]] = memref.load %arg0[%{{.*}}] : memref<100xi64>
// CHECK: arith.cmpi slt, %[[T]], %c24_i64
// CHECK: memref.atomic_rmw addf
// CHECK-NOT: latch_contract
func.func @rows_linearized(%tok: memref<100xi64>, %v: memref<100x16xf32>, %o: memref<3x8x16xf32>) {
  linalg.generic {indexing_maps = [#l_tok, #l_val, #l_out], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%tok, %v : memref<100xi64>, memref<100x16xf32>) outs(%o : memref<3x8x16xf32>) {
  ^bb0(%t: i64, %x: f32, %acc: f32):
    %b = linalg.index 0 : index
    %s = linalg.index 1 : index
    %r = affine.apply #l_lin()[%s, %b]
    %ri = arith.index_cast %r : index to i64
    %h = arith.cmpi eq, %t, %ri : i64
    %f = arith.uitofp %h : i1 to f32
    %p = arith.mulf %f, %x : f32
    %sum = arith.addf %acc, %p : f32
    linalg.yield %sum : f32
  }
  return
}

// -----
// A linearization with the wrong strides (s + b * 4 over an [3, 8] row space) is not the
// row coordinate: no scatter.
#n_tok = affine_map<(b, s, n, k) -> (k)>
#n_val = affine_map<(b, s, n, k) -> (k, n)>
#n_out = affine_map<(b, s, n, k) -> (b, s, n)>
#n_lin = affine_map<()[s0, s1] -> (s0 + s1 * 4)>
// CHECK-LABEL: func.func @rows_wrong_strides(
// CHECK-NOT: memref.atomic_rmw
// CHECK: return
func.func @rows_wrong_strides(%tok: memref<100xi64>, %v: memref<100x16xf32>, %o: memref<3x8x16xf32>) {
  linalg.generic {indexing_maps = [#n_tok, #n_val, #n_out], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%tok, %v : memref<100xi64>, memref<100x16xf32>) outs(%o : memref<3x8x16xf32>) {
  ^bb0(%t: i64, %x: f32, %acc: f32):
    %b = linalg.index 0 : index
    %s = linalg.index 1 : index
    %r = affine.apply #n_lin()[%s, %b]
    %ri = arith.index_cast %r : index to i64
    %h = arith.cmpi eq, %t, %ri : i64
    %f = arith.uitofp %h : i1 to f32
    %p = arith.mulf %f, %x : f32
    %sum = arith.addf %acc, %p : f32
    linalg.yield %sum : f32
  }
  return
}

// -----
// The rows in another loop order (latch-wrap-host-compute puts the output's unit-stride
// dimension first): loops (n, s, b, k), output [b, s, n].  The target is still split
// row-major over the output's (b, s).
#q_tok = affine_map<(n, s, b, k) -> (k)>
#q_ar = affine_map<(n, s, b, k) -> (b, s)>
#q_val = affine_map<(n, s, b, k) -> (k, n)>
#q_out = affine_map<(n, s, b, k) -> (b, s, n)>
#q_1 = affine_map<(i) -> (i)>
// CHECK-LABEL: func.func @rows_permuted(
// CHECK: arith.cmpi slt, %{{.*}}, %c24_i64
// CHECK: memref.atomic_rmw addi
// CHECK: arith.minsi
// ATOMIC-LABEL: func.func @rows_permuted(
// ATOMIC: %[[T:.*]] = memref.load %arg0[%{{.*}}] : memref<100xi64>
// ATOMIC: arith.cmpi slt, %[[T]], %c24_i64
// ATOMIC: %[[ROW:.*]] = arith.index_cast %[[T]] : i64 to index
// ATOMIC: %[[S:.*]] = arith.remui %[[ROW]], %c8
// ATOMIC: %[[B:.*]] = arith.divui %[[ROW]], %c8
// ATOMIC: memref.atomic_rmw addf %{{.*}}, %arg2[%[[B]], %[[S]], %{{.*}}]
func.func @rows_permuted(%tok: memref<100xi64>, %v: memref<100x16xf32>, %o: memref<3x8x16xf32>) {
  %ar = memref.alloc() : memref<24xi64>
  linalg.generic {indexing_maps = [#q_1], iterator_types = ["parallel"]} outs(%ar : memref<24xi64>) {
  ^bb0(%x: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  }
  %ar2 = memref.expand_shape %ar [[0, 1]] output_shape [3, 8] : memref<24xi64> into memref<3x8xi64>
  linalg.generic {indexing_maps = [#q_tok, #q_ar, #q_val, #q_out], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%tok, %ar2, %v : memref<100xi64>, memref<3x8xi64>, memref<100x16xf32>) outs(%o : memref<3x8x16xf32>) {
  ^bb0(%t: i64, %r: i64, %x: f32, %acc: f32):
    %h = arith.cmpi eq, %t, %r : i64
    %f = arith.uitofp %h : i1 to f32
    %p = arith.mulf %f, %x : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
  return
}

// -----
// A just-zeroed output read only by a bf16 copy right after the product (autocast's
// rounding of a matmul's result): the kernel writes the rounded values into the copy's
// buffer (its allocation hoisted in front), and the fill and the copy go.
// CHECK-LABEL: func.func @rounded(
// CHECK: %[[OUT:.*]] = memref.alloc() {latch.offset = 16384 : i64} : memref<64x64xbf16>
// CHECK: gpu.launch_func @latch_contract_{{[0-9]+}}::@contract {{.*}} args(%arg0 : memref<64x32xbf16>, %arg1 : memref<32x64xbf16>, %[[OUT]] : memref<64x64xbf16>)
// CHECK-NOT: linalg.generic
// CHECK: return %[[OUT]]
// CHECK: gpu.func @contract(%{{.*}}: memref<64x32xbf16>, %{{.*}}: memref<32x64xbf16>, %{{.*}}: memref<64x64xbf16>)
// Neighbouring columns of an accumulator fragment go out as one 4-byte store.
// CHECK: %[[LO:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT: %[[HI:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT: %[[BOTH:.*]] = vector.from_elements %[[LO]], %[[HI]] : vector<2xbf16>
// CHECK-NEXT: vector.store %[[BOTH]], %{{.*}} {alignment = 4 : i64} : memref<64x64xbf16>, vector<2xbf16>
// SIMT-LABEL: func.func @rounded(
// SIMT: gpu.func @contract(
// SIMT-NOT: vector.store
// SIMT: arith.truncf %{{.*}} : f32 to bf16
// SIMT-NEXT: memref.store %{{.*}} : memref<64x64xbf16>
#ra = affine_map<(i, j, k) -> (i, k)>
#rb = affine_map<(i, j, k) -> (k, j)>
#rc = affine_map<(i, j, k) -> (i, j)>
#rid = affine_map<(i, j) -> (i, j)>
func.func @rounded(%x: memref<64x32xbf16>, %w: memref<32x64xbf16>) -> memref<64x64xbf16> {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() {latch.offset = 0 : i64} : memref<64x64xf32>
  linalg.generic {indexing_maps = [#rid], iterator_types = ["parallel", "parallel"]} outs(%acc : memref<64x64xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#ra, #rb, #rc], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w : memref<64x32xbf16>, memref<32x64xbf16>) outs(%acc : memref<64x64xf32>) {
  ^bb0(%p: bf16, %q: bf16, %o: f32):
    %pe = arith.extf %p : bf16 to f32
    %qe = arith.extf %q : bf16 to f32
    %m = arith.mulf %pe, %qe : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  %out = memref.alloc() {latch.offset = 16384 : i64} : memref<64x64xbf16>
  linalg.generic {indexing_maps = [#rid, #rid], iterator_types = ["parallel", "parallel"]} ins(%acc : memref<64x64xf32>) outs(%out : memref<64x64xbf16>) {
  ^bb0(%v: f32, %o: bf16):
    %t = arith.truncf %v : f32 to bf16
    linalg.yield %t : bf16
  }
  return %out : memref<64x64xbf16>
}

// -----
// The same, but the memory plan gave the copy the slot of an operand that dies at the
// product (live ranges that do not overlap): writing the copy from the kernel would
// overwrite the operand while other blocks still read it, so the copy stays.  Its only
// use of the product being a truncf, the kernel writes the product rounded to bf16 at the
// f32 buffer's planned offset instead, and the copy copies bf16 (ROUND_FOR_READERS).
// CHECK-LABEL: func.func @rounded_into_operand_slot(
// CHECK: %[[R:.*]] = memref.alloc() {latch.offset = 0 : i64} : memref<64x64xbf16>
// CHECK: gpu.launch_func {{.*}} args({{.*}}, %[[R]] : memref<64x64xbf16>)
// CHECK: linalg.generic
// CHECK-SAME: ins(%[[R]] : memref<64x64xbf16>)
// CHECK-NOT: arith.truncf
// CHECK: return
#ra = affine_map<(i, j, k) -> (i, k)>
#rb = affine_map<(i, j, k) -> (k, j)>
#rc = affine_map<(i, j, k) -> (i, j)>
#rid = affine_map<(i, j) -> (i, j)>
func.func @rounded_into_operand_slot(%w: memref<32x64xbf16>) -> memref<64x64xbf16> {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : bf16
  %x = memref.alloc() {latch.offset = 16384 : i64} : memref<64x32xbf16>
  linalg.generic {indexing_maps = [#rid], iterator_types = ["parallel", "parallel"]} outs(%x : memref<64x32xbf16>) {
  ^bb0(%o: bf16):
    linalg.yield %one : bf16
  }
  %acc = memref.alloc() {latch.offset = 0 : i64} : memref<64x64xf32>
  linalg.generic {indexing_maps = [#rid], iterator_types = ["parallel", "parallel"]} outs(%acc : memref<64x64xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#ra, #rb, #rc], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w : memref<64x32xbf16>, memref<32x64xbf16>) outs(%acc : memref<64x64xf32>) {
  ^bb0(%p: bf16, %q: bf16, %o: f32):
    %pe = arith.extf %p : bf16 to f32
    %qe = arith.extf %q : bf16 to f32
    %m = arith.mulf %pe, %qe : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  %out = memref.alloc() {latch.offset = 16384 : i64} : memref<64x64xbf16>
  linalg.generic {indexing_maps = [#rid, #rid], iterator_types = ["parallel", "parallel"]} ins(%acc : memref<64x64xf32>) outs(%out : memref<64x64xbf16>) {
  ^bb0(%v: f32, %o: bf16):
    %t = arith.truncf %v : f32 to bf16
    linalg.yield %t : bf16
  }
  return %out : memref<64x64xbf16>
}
