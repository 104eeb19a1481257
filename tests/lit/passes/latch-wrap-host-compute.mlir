// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-wrap-host-compute)' | FileCheck %s
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-wrap-host-compute, latch-form-kernels)' | FileCheck %s --check-prefix=KERNELS
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-wrap-host-compute{chunks=false})' | FileCheck %s --check-prefix=STRIDED
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-wrap-host-compute{last-block-sums=true})' | FileCheck %s --check-prefix=LAST
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-wrap-host-compute{row-readers=false row-writers=false})' | FileCheck %s --check-prefix=APART
// Host code that touches buffers after bufferization (loads, stores, scalar math on loaded
// values, 0-d updates, copies) is wrapped, in order, into one-iteration scf.parallel loops
// (kernels with one working thread); full sum reductions become one-block gpu.launch ops; allocations between wrapped ops are hoisted in front; parallel linalg
// ops are left for latch-form-kernels.  After latch-form-kernels the host function holds only
// constants, allocations, gpu.launch_func and the return.

#id = affine_map<(d0) -> (d0)>
#all = affine_map<(d0) -> ()>
#s = affine_map<() -> ()>
// CHECK-LABEL: func.func @clip_and_count(
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel"]
// CHECK: scf.parallel (%{{.*}}) = (%{{.*}}) to (%{{.*}}) step (%{{.*}}) {
// CHECK:   memref.store %{{.*}}, %[[ACC:[a-z0-9_]+]][]
// CHECK:   scf.reduce
// CHECK: } {latch.serial}
// The full sum reduction becomes one block of 256 threads: strided partial sums in a
// register (a chunk of 4 consecutive f32 a trip, one 16-byte load), gpu.all_reduce,
// thread 0 adds the total to the output.
// CHECK: %[[ONE:c1[_0-9]*]] = arith.constant 1 : index
// CHECK: %[[N:c256[_0-9]*]] = arith.constant 256 : index
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %[[ONE]], {{.*}} = %[[ONE]], {{.*}} = %[[ONE]]) threads(%[[TX:[a-z0-9_]+]], {{.*}}) in ({{.*}} = %[[N]], {{.*}} = %[[ONE]], {{.*}} = %[[ONE]])
// CHECK:   %[[PART:[0-9]+]] = scf.for %[[L:[a-z0-9_]+]] = %[[TX]] to %{{.*}} step %{{.*}} iter_args(%[[P:[a-z0-9_]+]] = %{{.*}}) -> (f32)
// STRIDED-LABEL: func.func @clip_and_count(
// STRIDED: scf.for %[[L:[a-z0-9_]+]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[P:[a-z0-9_]+]] = %{{.*}}) -> (f32)
// STRIDED-NEXT: %[[X:[0-9]+]] = memref.load %{{.*}}[%[[L]]]
// STRIDED-NEXT: arith.addf %[[P]], %[[X]]
// CHECK:     %[[F:[0-9]+]] = arith.muli %[[L]], %{{.*}}
// CHECK:     %[[X:[0-9]+]] = vector.load %{{.*}}[%[[F]]] {alignment = 16 : i64} : memref<1024xf32>, vector<4xf32>
// CHECK:     %[[X0:[0-9]+]] = vector.extract %[[X]][0]
// CHECK:     %[[S0:[0-9]+]] = arith.addf %[[P]], %[[X0]]
// CHECK-COUNT-3: arith.addf
// CHECK:     scf.yield
// CHECK:   %[[TOT:[0-9]+]] = gpu.all_reduce add %[[PART]] uniform
// CHECK:   scf.if
// CHECK:     %[[OLD:[0-9]+]] = memref.load %[[ACC]][]
// CHECK:     arith.addf %[[OLD]], %[[TOT]]
// CHECK:   gpu.terminator
// The scalar tail: the allocation between wrapped ops is hoisted in front of the loop.
// CHECK: %[[COEF:[a-z0-9_]+]] = memref.alloc() {{.*}}latch.pinned
// CHECK: %[[CNT:[a-z0-9_]+]] = memref.alloc() {{.*}}latch.pinned
// CHECK: scf.parallel (%{{.*}}) = (%{{.*}}) to (%{{.*}}) step (%{{.*}}) {
// CHECK:   memref.load %[[ACC]][]
// CHECK:   math.sqrt
// CHECK:   memref.store %{{.*}}, %[[COEF]][]
// CHECK:   memref.load %arg1[]
// CHECK:   arith.addi
// CHECK:   memref.store %{{.*}}, %[[CNT]][]
// CHECK:   scf.reduce
// CHECK: } {latch.serial}
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel"]
// CHECK: return
// KERNELS-LABEL: func.func @clip_and_count(
// KERNELS-NOT: memref.load
// KERNELS-NOT: memref.store
// KERNELS-NOT: scf.
// KERNELS-NOT: cf.
// KERNELS-COUNT-5: gpu.launch_func
// KERNELS-NEXT: return
func.func @clip_and_count(%g: memref<1024xf32>, %count: memref<i64>) -> (memref<1024xf32>, memref<i64>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %c1 = arith.constant 1 : i64
  %sq = memref.alloc() {latch.offset = 0 : i64} : memref<1024xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%g : memref<1024xf32>) outs(%sq : memref<1024xf32>) {
  ^bb0(%a: f32, %o: f32):
    %p = arith.mulf %a, %a : f32
    linalg.yield %p : f32
  }
  %acc = memref.alloc() {latch.offset = 4096 : i64} : memref<f32>
  memref.store %zero, %acc[] : memref<f32>
  linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction"]} ins(%sq : memref<1024xf32>) outs(%acc : memref<f32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %o, %a : f32
    linalg.yield %s : f32
  }
  %t = memref.load %acc[] : memref<f32>
  %n = math.sqrt %t : f32
  %d = arith.addf %n, %one : f32
  %coef = arith.divf %one, %d : f32
  %cbuf = memref.alloc() {latch.pinned} : memref<f32>
  memref.store %coef, %cbuf[] : memref<f32>
  %k = memref.load %count[] : memref<i64>
  %k1 = arith.addi %k, %c1 : i64
  %newcount = memref.alloc() {latch.pinned} : memref<i64>
  memref.store %k1, %newcount[] : memref<i64>
  %out = memref.alloc() {latch.pinned} : memref<1024xf32>
  linalg.generic {indexing_maps = [#id, #all, #id], iterator_types = ["parallel"]} ins(%g, %cbuf : memref<1024xf32>, memref<f32>) outs(%out : memref<1024xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %p = arith.mulf %a, %c : f32
    linalg.yield %p : f32
  }
  return %out, %newcount : memref<1024xf32>, memref<i64>
}

// -----

// memref.copy of rank >= 1 becomes a parallel copying linalg.generic (an ordinary kernel);
// of rank 0 a load + store that is wrapped.
// CHECK-LABEL: func.func @copies(
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel"]{{.*}} ins(%arg0 : memref<16xf32>) outs(%{{.*}} : memref<16xf32>)
// CHECK-NEXT: ^bb0(%[[IN:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT: linalg.yield %[[IN]] : f32
// CHECK: scf.parallel
// CHECK:   %[[V:.*]] = memref.load %arg1[]
// CHECK:   memref.store %[[V]]
// CHECK-NOT: memref.copy
// KERNELS-LABEL: func.func @copies(
// KERNELS-COUNT-2: gpu.launch_func
// KERNELS-NEXT: return
func.func @copies(%a: memref<16xf32>, %s: memref<f32>) -> (memref<16xf32>, memref<f32>) {
  %b = memref.alloc() {latch.pinned} : memref<16xf32>
  memref.copy %a, %b : memref<16xf32> to memref<16xf32>
  %t = memref.alloc() {latch.pinned} : memref<f32>
  memref.copy %s, %t : memref<f32> to memref<f32>
  return %b, %t : memref<16xf32>, memref<f32>
}

// -----

// A copy of a buffer onto itself (one-shot bufferization leaves one for each tensor of the
// clip's stacked sums of squares) goes: no load, no store, no launch.
// CHECK-LABEL: func.func @self_copy(
// CHECK-NOT: memref.load
// CHECK-NOT: scf.parallel
// CHECK: return
// KERNELS-LABEL: func.func @self_copy(
// KERNELS-NOT: gpu.launch_func
// KERNELS: return
func.func @self_copy(%v: memref<4xf32>) {
  %e = memref.subview %v[2] [1] [1] : memref<4xf32> to memref<f32, strided<[], offset: 2>>
  memref.copy %e, %e : memref<f32, strided<[], offset: 2>> to memref<f32, strided<[], offset: 2>>
  return
}

// -----

// A scalar computed by one wrapped run and used by a later one (the clip's running sum of
// squares across per-tensor reductions) travels through a 0-d buffer: stored at the end
// of the run that computes it, loaded again where it is used.
#id = affine_map<(d0) -> (d0)>
#all = affine_map<(d0) -> ()>
// CHECK-LABEL: func.func @scalar_across_reductions(
// CHECK: gpu.launch
// CHECK: %[[SPILL:[a-z0-9_]+]] = memref.alloc() : memref<f32>
// CHECK: scf.parallel
// CHECK:   %[[VA:[0-9]+]] = memref.load %{{.*}}[] : memref<f32>
// CHECK:   memref.store %[[VA]], %[[SPILL]][]
// CHECK: } {latch.serial}
// CHECK: gpu.launch
// CHECK: scf.parallel
// CHECK:   memref.load %[[SPILL]][]
// CHECK:   arith.addf
// CHECK: } {latch.serial}
// KERNELS-LABEL: func.func @scalar_across_reductions(
// KERNELS-NOT: scf.
// KERNELS-COUNT-5: gpu.launch_func
// KERNELS-NEXT: return
func.func @scalar_across_reductions(%a: memref<64xf32>, %b: memref<64xf32>) -> memref<f32> {
  %zero = arith.constant 0.0 : f32
  %sa = memref.alloc() {latch.offset = 0 : i64} : memref<f32>
  memref.store %zero, %sa[] : memref<f32>
  linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction"]} ins(%a : memref<64xf32>) outs(%sa : memref<f32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %acc, %x : f32
    linalg.yield %s : f32
  }
  %va = memref.load %sa[] : memref<f32>
  %sb = memref.alloc() {latch.offset = 256 : i64} : memref<f32>
  memref.store %zero, %sb[] : memref<f32>
  linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction"]} ins(%b : memref<64xf32>) outs(%sb : memref<f32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %acc, %x : f32
    linalg.yield %s : f32
  }
  %vb = memref.load %sb[] : memref<f32>
  %t = arith.addf %va, %vb : f32
  %out = memref.alloc() {latch.pinned} : memref<f32>
  memref.store %t, %out[] : memref<f32>
  return %out : memref<f32>
}

// -----

// A reduction loop in front of a parallel one (a bias gradient) is moved inside, so that
// the op becomes one kernel and not a host loop of kernels.
#rp_in = affine_map<(d0, d1) -> (d0, d1)>
#rp_out = affine_map<(d0, d1) -> (d1)>
// CHECK-DAG: #[[IN:map[0-9]*]] = affine_map<(d0, d1) -> (d1, d0)>
// CHECK-DAG: #[[OUT:map[0-9]*]] = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @bias_grad(
// CHECK: linalg.generic {indexing_maps = [#[[IN]], #[[OUT]]], iterator_types = ["parallel", "reduction"]}
// KERNELS-LABEL: func.func @bias_grad(
// KERNELS-NOT: cf.
// KERNELS-COUNT-2: gpu.launch_func
// KERNELS-NEXT: return
func.func @bias_grad(%g: memref<16x32xf32>) -> memref<32xf32> {
  %zero = arith.constant 0.0 : f32
  %out = memref.alloc() {latch.pinned} : memref<32xf32>
  linalg.fill ins(%zero : f32) outs(%out : memref<32xf32>)
  linalg.generic {indexing_maps = [#rp_in, #rp_out], iterator_types = ["reduction", "parallel"]} ins(%g : memref<16x32xf32>) outs(%out : memref<32xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %acc, %x : f32
    linalg.yield %s : f32
  }
  return %out : memref<32xf32>
}

// -----

// Buffers of i1 become buffers of i8 (NVPTX cannot store i1): bodies truncate what they
// read and extend what they yield.
#id = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @mask(
// CHECK: %[[M:[a-z0-9_]+]] = memref.alloc() {{.*}} : memref<8xi8>
// CHECK: outs(%[[M]] : memref<8xi8>)
// CHECK: %[[C:[0-9]+]] = arith.cmpf ogt
// CHECK: %[[W:[0-9]+]] = arith.extui %[[C]] : i1 to i8
// CHECK: linalg.yield %[[W]] : i8
// CHECK: ins(%[[M]], %{{.*}} : memref<8xi8>, memref<8xf32>)
// CHECK: ^bb0(%[[IN:[a-z0-9_]+]]: i8,
// CHECK: %[[T:[0-9]+]] = arith.trunci %[[IN]] : i8 to i1
// CHECK: arith.select %[[T]]
func.func @mask(%x: memref<8xf32>) -> memref<8xf32> {
  %zero = arith.constant 0.0 : f32
  %m = memref.alloc() {latch.offset = 0 : i64} : memref<8xi1>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%x : memref<8xf32>) outs(%m : memref<8xi1>) {
  ^bb0(%a: f32, %o: i1):
    %c = arith.cmpf ogt, %a, %zero : f32
    linalg.yield %c : i1
  }
  %out = memref.alloc() {latch.pinned} : memref<8xf32>
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]} ins(%m, %x : memref<8xi1>, memref<8xf32>) outs(%out : memref<8xf32>) {
  ^bb0(%c: i1, %a: f32, %o: f32):
    %r = arith.select %c, %a, %zero : f32
    linalg.yield %r : f32
  }
  return %out : memref<8xf32>
}

// -----

// latch.every's scf.if around kernels is if-converted: the condition goes to a 0-d i8
// flag, the branch's kernels run unconditionally into their own buffers, and the result
// is a select copy `flag ? new : old`.
#id = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @every(
// CHECK: %[[FLAG:[a-z0-9_]+]] = memref.alloc() : memref<i8>
// CHECK: scf.parallel
// CHECK:   %[[DUE:[0-9]+]] = arith.cmpi eq
// CHECK:   %[[W:[0-9]+]] = arith.extui %[[DUE]] : i1 to i8
// CHECK:   memref.store %[[W]], %[[FLAG]][]
// CHECK: } {latch.serial}
// CHECK: %[[UPD:[a-z0-9_]+]] = memref.alloc() : memref<8xf32>
// CHECK: linalg.generic {{.*}} outs(%[[UPD]] : memref<8xf32>)
// CHECK: %[[NEW:[a-z0-9_]+]] = memref.alloc() : memref<8xf32>
// CHECK: linalg.generic {{.*}} ins(%[[FLAG]], %[[UPD]], %arg0 : memref<i8>, memref<8xf32>, memref<8xf32>) outs(%[[NEW]] : memref<8xf32>)
// CHECK: arith.trunci
// CHECK: arith.select
// CHECK-NOT: scf.if
// CHECK: return %[[NEW]],
// (the update and the select, both row by row over the 8 elements, run as one kernel:
// latch-fuse-rows)
// KERNELS-LABEL: func.func @every(
// KERNELS-NOT: scf.
// KERNELS-NOT: cf.
// KERNELS-COUNT-3: gpu.launch_func
// KERNELS-NEXT: return
func.func @every(%w: memref<8xf32>, %g: memref<8xf32>, %step: memref<i64>) -> (memref<8xf32>, memref<i64>) {
  %c1 = arith.constant 1 : i64
  %c2 = arith.constant 2 : i64
  %c0 = arith.constant 0 : i64
  %s = memref.load %step[] : memref<i64>
  %s1 = arith.addi %s, %c1 : i64
  %r = arith.remsi %s1, %c2 : i64
  %due = arith.cmpi eq, %r, %c0 : i64
  %new = scf.if %due -> (memref<8xf32>) {
    %upd = memref.alloc() : memref<8xf32>
    linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]} ins(%w, %g : memref<8xf32>, memref<8xf32>) outs(%upd : memref<8xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.subf %a, %b : f32
      linalg.yield %d : f32
    }
    scf.yield %upd : memref<8xf32>
  } else {
    scf.yield %w : memref<8xf32>
  }
  %cnt = memref.alloc() {latch.pinned} : memref<i64>
  memref.store %s1, %cnt[] : memref<i64>
  return %new, %cnt : memref<8xf32>, memref<i64>
}

// -----

// A gather with torch-mlir's bounds checks (TinyMoE-196M's position embedding): the loop nest
// is an exact multiple of the 32 x 8 tile, and convert-parallel-loops-to-gpu leaves such a
// nest with a cf.assert in it on the host.  The asserts are dropped; the gather is a kernel.
#row = affine_map<(d0, d1) -> (d0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @gather_with_asserts(
// CHECK-NOT: cf.assert
// CHECK: return
// KERNELS-LABEL: func.func @gather_with_asserts(
// KERNELS-NOT: scf.
// KERNELS-NOT: cf.
// KERNELS-COUNT-2: gpu.launch_func
// KERNELS-NEXT: return
func.func @gather_with_asserts(%table: memref<1024x768xf32>, %idx: memref<1024xi64>) -> memref<1024x768xf32> {
  %c1024 = arith.constant 1024 : index
  %c0_i64 = arith.constant 0 : i64
  %out = memref.alloc() {latch.pinned} : memref<1024x768xf32>
  linalg.generic {indexing_maps = [#row, #id2], iterator_types = ["parallel", "parallel"]} ins(%idx : memref<1024xi64>) outs(%out : memref<1024x768xf32>) {
  ^bb0(%i: i64, %o: f32):
    %x = arith.index_cast %i : i64 to index
    %j = linalg.index 1 : index
    %lt = arith.cmpi slt, %x, %c1024 : index
    cf.assert %lt, "index must be smaller than dim size"
    %ge = arith.cmpi sge, %i, %c0_i64 : i64
    cf.assert %ge, "index must be larger or equal to 0"
    %v = memref.load %table[%x, %j] : memref<1024x768xf32>
    linalg.yield %v : f32
  }
  %res = memref.alloc() {latch.pinned} : memref<1024x768xf32>
  memref.copy %out, %res : memref<1024x768xf32> to memref<1024x768xf32>
  return %res : memref<1024x768xf32>
}

// -----

// A buffer select (canonicalize's fold of an scf.if that only picks a buffer; every(N)'s
// grad_acc reset `select(due, zeros, acc + g)`) whose operand is filled only later, inside
// the branch around the optimizer's kernels.  The select only picks a pointer: its copy
// must read the zeros after the hoisted (predicated) fill, i.e. go where the result is
// first used, not where the select stood.
#id = affine_map<(d0) -> (d0)>
#sc = affine_map<(d0) -> ()>
// CHECK-LABEL: func.func @select_filled_later(
// CHECK: %[[ZEROS:[a-z0-9_]+]] = memref.alloc() {latch.pinned} : memref<8xf32>
// CHECK: %[[SUM:[a-z0-9_]+]] = memref.alloc() {latch.pinned} : memref<8xf32>
// CHECK: linalg.generic {{.*}} outs(%[[SUM]] : memref<8xf32>)
// CHECK: %[[RESET:[a-z0-9_]+]] = memref.alloc() : memref<8xf32>
// The branch's fill of the zeros, predicated on the flag, comes first ...
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : memref<i8>) outs(%[[ZEROS]] : memref<8xf32>)
// ... and then the select copy that reads them.
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[ZEROS]], %[[SUM]] : memref<i8>, memref<8xf32>, memref<8xf32>) outs(%[[RESET]] : memref<8xf32>)
// CHECK-NOT: linalg.generic {{.*}} outs(%[[ZEROS]] : memref<8xf32>)
// CHECK: return %{{.*}}, %[[RESET]] :
// KERNELS-LABEL: func.func @select_filled_later(
// KERNELS-NOT: scf.
// KERNELS-NOT: cf.
// (the select's copy reads each element of the zeros where the predicated fill stored it:
// latch-fuse-element-readers runs it in the fill's threads, after the store)
// KERNELS-COUNT-5: gpu.launch_func
// KERNELS-NEXT: return
func.func @select_filled_later(%w: memref<8xf32>, %acc: memref<8xf32>, %g: memref<8xf32>, %step: memref<i64>) -> (memref<8xf32>, memref<8xf32>) {
  %c1 = arith.constant 1 : i64
  %c2 = arith.constant 2 : i64
  %c0 = arith.constant 0 : i64
  %zero = arith.constant 0.0 : f32
  %s = memref.load %step[] : memref<i64>
  %s1 = arith.addi %s, %c1 : i64
  %r = arith.remsi %s1, %c2 : i64
  %due = arith.cmpi eq, %r, %c0 : i64
  %zeros = memref.alloc() {latch.pinned} : memref<8xf32>
  %sum = memref.alloc() {latch.pinned} : memref<8xf32>
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]} ins(%acc, %g : memref<8xf32>, memref<8xf32>) outs(%sum : memref<8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.addf %a, %b : f32
    linalg.yield %d : f32
  }
  %reset = arith.select %due, %zeros, %sum : memref<8xf32>
  %new = scf.if %due -> (memref<8xf32>) {
    %upd = memref.alloc() : memref<8xf32>
    linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]} ins(%w, %sum : memref<8xf32>, memref<8xf32>) outs(%upd : memref<8xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.subf %a, %b : f32
      linalg.yield %d : f32
    }
    linalg.generic {indexing_maps = [#id], iterator_types = ["parallel"]} outs(%zeros : memref<8xf32>) {
    ^bb0(%o: f32):
      linalg.yield %zero : f32
    }
    scf.yield %upd : memref<8xf32>
  } else {
    scf.yield %w : memref<8xf32>
  }
  return %new, %reset : memref<8xf32>, memref<8xf32>
}

// -----
// A large full sum (65536 elements) takes several blocks of 2048 (8 a thread): each
// stores its block total in a scratch buffer, then one block sums the 32 totals in order
// into the output (no atomics).  With last-block-sums=true it is one launch: thread 0
// fences (membar.gl) and takes a ticket from a counter (an i32 atomic add; the counter an
// unshared slot, zero at start); the block holding the last ticket fences again, sums the
// 32 totals in the same order and puts the counter back to 0.
#i1 = affine_map<(d0) -> (d0)>
#o1 = affine_map<(d0) -> ()>
// CHECK-LABEL: func.func @big_sum(
// CHECK: %[[SCR:.*]] = memref.alloc() : memref<32xf32>
// CHECK: %[[G:c32[_0-9]*]] = arith.constant 32 : index
// CHECK: gpu.launch blocks(%[[B:[a-z0-9_]+]], {{.*}}) in ({{.*}} = %[[G]],
// CHECK:   gpu.all_reduce add
// CHECK:   memref.store %{{.*}}, %[[SCR]][%[[B]]]
// CHECK-NOT: memref.atomic_rmw
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %c1
// CHECK:   memref.load %[[SCR]][
// CHECK:   gpu.all_reduce add
// CHECK:   memref.load %arg1[]
// CHECK-NOT: linalg.generic
// LAST-LABEL: func.func @big_sum(
// LAST: %[[SCR:.*]] = memref.alloc() : memref<32xf32>
// LAST: %[[CNT:.*]] = memref.alloc() {latch.zero_at_start} : memref<1xi32>
// LAST: %[[G:c32[_0-9]*]] = arith.constant 32 : index
// LAST: gpu.launch blocks(%[[B:[a-z0-9_]+]], {{.*}}) in ({{.*}} = %[[G]],
// LAST:   gpu.all_reduce add
// LAST:   memref.store %{{.*}}, %[[SCR]][%[[B]]]
// LAST:   scf.if %{{.*}} -> (i32) {
// LAST-NEXT: nvvm.memory.barrier <gpu>
// LAST:     memref.atomic_rmw addi %{{.*}}, %[[CNT]]
// LAST:   %[[T:.*]] = gpu.all_reduce maxui
// LAST:   %[[LAST:.*]] = arith.cmpi eq, %[[T]], %c31_i32
// LAST:   scf.if %[[LAST]] {
// LAST-NEXT: nvvm.memory.barrier <gpu>
// LAST:     memref.load %[[SCR]][
// LAST:     gpu.all_reduce add
// LAST:     memref.load %arg1[]
// LAST:     memref.store %c0_i32, %[[CNT]]
// LAST-NOT: gpu.launch
// LAST: return
func.func @big_sum(%x: memref<65536xf32>, %out: memref<f32>) {
  linalg.generic {indexing_maps = [#i1, #o1], iterator_types = ["reduction"]}
      ins(%x : memref<65536xf32>) outs(%out : memref<f32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %a, %acc : f32
    linalg.yield %s : f32
  }
  return
}

// -----
// Parallel loops are reversed so that the unit-stride dimension varies fastest; the
// flattened 16x256 iteration space, four f32 lanes a thread, takes 4 blocks of 256
// threads, and thread i of the launch copies elements [i / 64, 4 (i % 64) ..+3]
// (consecutive threads, consecutive 16-byte chunks).
// CHECK-LABEL: func.func @coalesced_copy(
// CHECK: linalg.generic
// KERNELS-LABEL: func.func @coalesced_copy(
// KERNELS-DAG: %[[C4:.*]] = arith.constant 4 : index
// KERNELS-DAG: %[[C1:.*]] = arith.constant 1 : index
// KERNELS-DAG: %[[C256:.*]] = arith.constant 256 : index
// KERNELS: gpu.launch_func @{{.*}} blocks in (%[[C4]], %[[C1]], %[[C1]]) threads in (%[[C256]], %[[C1]], %[[C1]])
// KERNELS: gpu.func @coalesced_copy_kernel(
// KERNELS: %[[I:.*]] = arith.addi
// KERNELS-DAG: %[[COL:.*]] = arith.remui %[[I]], %{{.*}}
// KERNELS-DAG: %[[ROW:.*]] = arith.divui %[[I]], %{{.*}}
// KERNELS: %[[COL4:.*]] = arith.muli %[[COL]], %{{.*}}
// KERNELS: vector.load %{{.*}}[%[[ROW]], %[[COL4]]] {alignment = 16 : i64} : memref<16x256xf32>, vector<4xf32>
func.func @coalesced_copy(%a: memref<16x256xf32>, %b: memref<16x256xf32>) {
  memref.copy %a, %b : memref<16x256xf32> to memref<16x256xf32>
  return
}

// -----
// Row reductions get a group of threads per output element: a warp for short rows
// (butterfly of shuffles), a whole block for long ones (gpu.all_reduce); the partial
// results live in registers, and lane 0 combines the total with the output's initial value.
// Each thread's strided loop is unrolled 4 times (same elements, same order), with a
// remainder loop when the trip count does not divide; where the row is contiguous and
// walked in whole chunks, a thread takes 4 consecutive f32 a load (16 bytes) from 4 x its
// lane on, 1024 elements apart (the block's 256 threads cover 1024 a round).  A reduction over the *outer*
// dimension (the unit-stride input dimension is a parallel loop) gets column tiles
// instead: 8 consecutive f32 outputs per block (threadIdx.x), R threads (threadIdx.y)
// splitting the reduction, partials combined by a tree in workgroup memory.
#rr_in = affine_map<(d0, d1) -> (d0, d1)>
#rr_row = affine_map<(d0, d1) -> (d0)>
#rr_col = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @row_max(
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %c64, {{.*}}) threads({{.*}}) in ({{.*}} = %c256,
// CHECK: %[[FIRST:.*]] = arith.muli %{{.*}}, %c4 : index
// CHECK: %[[P:.*]] = scf.for %[[K:.*]] = %[[FIRST]] to %c4096 step %c4096{{.*}} iter_args(%{{.*}} = %cst) -> (f32)
// CHECK: vector.load %arg0[%{{.*}}, %[[K]]] {alignment = 16 : i64} : memref<64x4096xf32>, vector<4xf32>
// CHECK-COUNT-4: arith.maximumf
// CHECK: vector.load %arg0{{.*}} vector<4xf32>
// CHECK-COUNT-12: arith.maximumf
// CHECK: scf.yield
// CHECK-NOT: scf.for
// CHECK: gpu.all_reduce maximumf %[[P]] uniform
// CHECK: scf.if
// CHECK: memref.load %arg1
// CHECK: arith.maximumf
// CHECK: memref.store
// CHECK-NOT: linalg.generic
// CHECK-LABEL: func.func @col_sum_of_squares(
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %c4, {{.*}}) threads(%[[TX:.*]], %[[TY:.*]], %{{.*}}) in ({{.*}} = %c8, {{.*}} = %c16, {{.*}}) workgroup(%[[WG:.*]] : memref<128xf32, #gpu.address_space<workgroup>>)
// CHECK: %[[O:.*]] = arith.addi %{{.*}}, %[[TX]] : index
// CHECK: %[[OC:.*]] = arith.minui %[[O]], %c29
// CHECK: %[[MAIN:.*]] = scf.for %{{.*}} = %[[TY]] to %c64 step %c64{{.*}} iter_args(%{{.*}} = %cst) -> (f32)
// CHECK-COUNT-4: memref.load %arg0[%{{.*}}, %[[OC]]] : memref<100x30xf32>
// CHECK: scf.yield
// CHECK: %[[LO:.*]] = arith.addi %[[TY]], %c64
// CHECK: %[[REST:.*]] = scf.for %{{.*}} = %[[LO]] to %c100 step %c16{{.*}} iter_args(%{{.*}} = %[[MAIN]]) -> (f32)
// CHECK: memref.store %[[REST]], %[[WG]][%[[SLOT:.*]]] : memref<128xf32
// CHECK: gpu.barrier
// CHECK: scf.if
// CHECK: %[[OTHER:.*]] = arith.addi %[[SLOT]], %c64
// CHECK: memref.load %[[WG]][%[[OTHER]]]
// CHECK-COUNT-3: gpu.barrier
// CHECK-NOT: gpu.barrier
// CHECK: arith.cmpi ult, %[[O]], %c30
// CHECK: scf.if
// CHECK: %[[TOTAL:.*]] = memref.load %[[WG]][%[[TX]]]
// CHECK: %[[OLD:.*]] = memref.load %arg1[%[[OC]]]
// CHECK: %[[NEW:.*]] = arith.addf %[[OLD]], %[[TOTAL]]
// CHECK: memref.store %[[NEW]], %arg1[%[[OC]]]
// KERNELS: gpu.func @col_sum_of_squares_kernel({{.*}}) workgroup(%{{.*}} : memref<128xf32, #gpu.address_space<workgroup>>) kernel attributes {known_block_size = array<i32: 8, 16, 1>
// CHECK-LABEL: func.func @short_rows(
// CHECK: linalg.generic
func.func @row_max(%x: memref<64x4096xf32>, %m: memref<64xf32>) {
  linalg.generic {indexing_maps = [#rr_in, #rr_row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<64x4096xf32>) outs(%m : memref<64xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %r = arith.maximumf %a, %acc : f32
    linalg.yield %r : f32
  }
  return
}
func.func @col_sum_of_squares(%x: memref<100x30xf32>, %s: memref<30xf32>) {
  linalg.generic {indexing_maps = [#rr_in, #rr_col], iterator_types = ["reduction", "parallel"]}
      ins(%x : memref<100x30xf32>) outs(%s : memref<30xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %e = arith.mulf %a, %a : f32
    %r = arith.addf %acc, %e : f32
    linalg.yield %r : f32
  }
  return
}
func.func @short_rows(%x: memref<64x16xf32>, %m: memref<64xf32>) {
  linalg.generic {indexing_maps = [#rr_in, #rr_row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<64x16xf32>) outs(%m : memref<64xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %r = arith.addf %a, %acc : f32
    linalg.yield %r : f32
  }
  return
}

// -----
// A norm weight's gradient: sum over all tokens of x * g, one output per feature.  The
// features are the inputs' unit-stride dimension, so column tiles: 24 outputs / 8 = 3
// blocks of 8 x 16 threads; 128 tokens / 16 rows of threads = 8 elements each, all in the
// unrolled loop (no remainder, no clamping of the output index).  The token index is split
// by affine.apply (the divisors stay constants of the kernel), not arith.divui/remui.
#ng_in = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#ng_out = affine_map<(d0, d1, d2) -> (0, 0, d2)>
// CHECK-LABEL: func.func @norm_weight_grad(
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %c3, {{.*}}) threads(%[[TX:.*]], %[[TY:.*]], %{{.*}}) in ({{.*}} = %c8, {{.*}} = %c16, {{.*}}) workgroup(%[[WG:.*]] : memref<128xf32, #gpu.address_space<workgroup>>)
// CHECK: %[[O:.*]] = arith.addi %{{.*}}, %[[TX]] : index
// CHECK-NOT: arith.minui
// CHECK: %[[P:.*]] = scf.for %[[K:.*]] = %[[TY]] to %c128 step %c64{{.*}} iter_args(%{{.*}} = %cst) -> (f32)
// CHECK-DAG: %[[TOK:.*]] = affine.apply #{{.*}}(%[[K]])
// CHECK-DAG: %[[SEQ:.*]] = affine.apply #{{.*}}(%[[K]])
// CHECK: memref.load %arg0[%[[SEQ]], %[[TOK]], %[[O]]] : memref<2x64x24xf32>
// CHECK-NOT: arith.divui
// CHECK-NOT: arith.remui
// CHECK-COUNT-4: memref.load %arg1[%{{.*}}, %{{.*}}, %[[O]]] : memref<2x64x24xf32>
// CHECK: scf.yield
// CHECK-NOT: scf.for
// CHECK: memref.store %[[P]], %[[WG]]
// CHECK-COUNT-4: gpu.barrier
// CHECK-NOT: gpu.barrier
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[TY]], %c0
// CHECK-NEXT: scf.if %[[FIRST]]
// CHECK: memref.store %{{.*}}, %arg2[%c0{{.*}}, %c0{{.*}}, %[[O]]] : memref<1x1x24xf32>
func.func @norm_weight_grad(%x: memref<2x64x24xf32>, %g: memref<2x64x24xf32>,
                            %w: memref<1x1x24xf32>) {
  linalg.generic {indexing_maps = [#ng_in, #ng_in, #ng_out],
                  iterator_types = ["reduction", "reduction", "parallel"]}
      ins(%x, %g : memref<2x64x24xf32>, memref<2x64x24xf32>) outs(%w : memref<1x1x24xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %p, %acc : f32
    linalg.yield %r : f32
  }
  return
}

// -----
// torch's all/any over a row (a masked softmax's "whole row is -inf" test) reaches the GPU
// target as an i8 buffer holding an i1 (i1 buffers are widened): the body yields
// extui(andi/ori(trunci(acc), e)).  It gets the same cooperative kernels: the partial
// stays i1 in the loop and travels as i32 through shuffles, gpu.all_reduce and workgroup
// memory; the thread that stores narrows the old value, combines and widens again.
#lg_in = affine_map<(d0, d1) -> (d0, d1)>
#lg_row = affine_map<(d0, d1) -> (d0)>
#lg_col = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @row_all_neg_inf(
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %c6, {{.*}}) threads({{.*}}) in ({{.*}} = %c32, {{.*}} = %c8,
// CHECK: %[[T:.*]] = arith.constant true
// CHECK: %[[P:.*]] = scf.for %{{.*}} = %{{.*}} to %c1024 step %c128 iter_args(%{{.*}} = %[[T]]) -> (i1)
// CHECK-COUNT-4: arith.andi %{{.*}}, %{{.*}} : i1
// CHECK: scf.yield
// CHECK: %[[W:.*]] = arith.extui %[[P]] : i1 to i32
// CHECK: gpu.shuffle xor %[[W]]
// CHECK-COUNT-4: gpu.shuffle xor %{{.*}} : i32
// CHECK: %[[ALL:.*]] = arith.trunci %{{.*}} : i32 to i1
// CHECK: scf.if
// CHECK: %[[OLD8:.*]] = memref.load %arg1[%[[ROW:.*]]] : memref<48xi8>
// CHECK: %[[OLD:.*]] = arith.trunci %[[OLD8]] : i8 to i1
// CHECK: %[[NEW:.*]] = arith.andi %[[OLD]], %[[ALL]] : i1
// CHECK: %[[NEW8:.*]] = arith.extui %[[NEW]] : i1 to i8
// CHECK: memref.store %[[NEW8]], %arg1[%[[ROW]]] : memref<48xi8>
// CHECK-LABEL: func.func @row_any_long(
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %c4, {{.*}}) threads({{.*}}) in ({{.*}} = %c256,
// CHECK: %[[F:.*]] = arith.constant false
// CHECK: %[[P:.*]] = scf.for {{.*}} iter_args(%{{.*}} = %[[F]]) -> (i1)
// CHECK: %[[W:.*]] = arith.extui %[[P]] : i1 to i32
// CHECK: %[[ANY:.*]] = gpu.all_reduce or %[[W]] uniform
// CHECK: arith.trunci %[[ANY]] : i32 to i1
// CHECK-LABEL: func.func @col_any_nan(
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %c2, {{.*}}) threads({{.*}}) in ({{.*}} = %c8, {{.*}} = %c128, {{.*}}) workgroup(%[[WG:.*]] : memref<1024xi32, #gpu.address_space<workgroup>>)
// CHECK: %[[F:.*]] = arith.constant false
// CHECK: %[[P:.*]] = scf.for %{{.*}} to %c8192 step %c512{{.*}} iter_args(%{{.*}} = %[[F]]) -> (i1)
// CHECK-COUNT-4: arith.ori %{{.*}}, %{{.*}} : i1
// CHECK: %[[W:.*]] = arith.extui %[[P]] : i1 to i32
// CHECK: memref.store %[[W]], %[[WG]]
// CHECK-COUNT-7: arith.ori %{{.*}}, %{{.*}} : i32
// CHECK: %[[TOTAL:.*]] = memref.load %[[WG]]
// CHECK: arith.trunci %[[TOTAL]] : i32 to i1
// CHECK: arith.extui %{{.*}} : i1 to i8
// CHECK-LABEL: func.func @acc_read_twice(
// CHECK-NOT: gpu.launch
// CHECK: linalg.generic
// KERNELS: gpu.func @col_any_nan_kernel({{.*}}) workgroup(%{{.*}} : memref<1024xi32, #gpu.address_space<workgroup>>) kernel attributes {known_block_size = array<i32: 8, 128, 1>
func.func @row_all_neg_inf(%x: memref<48x1024xf32>, %m: memref<48xi8>) {
  %ninf = arith.constant 0xFF800000 : f32
  linalg.generic {indexing_maps = [#lg_in, #lg_row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<48x1024xf32>) outs(%m : memref<48xi8>) {
  ^bb0(%a: f32, %acc: i8):
    %t = arith.trunci %acc : i8 to i1
    %c = arith.cmpf oeq, %a, %ninf : f32
    %r = arith.andi %c, %t : i1
    %w = arith.extui %r : i1 to i8
    linalg.yield %w : i8
  }
  return
}
func.func @row_any_long(%x: memref<4x8192xf32>, %m: memref<4xi8>) {
  %z = arith.constant 0.0 : f32
  linalg.generic {indexing_maps = [#lg_in, #lg_row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x8192xf32>) outs(%m : memref<4xi8>) {
  ^bb0(%a: f32, %acc: i8):
    %t = arith.trunci %acc : i8 to i1
    %c = arith.cmpf ogt, %a, %z : f32
    %r = arith.ori %t, %c : i1
    %w = arith.extui %r : i1 to i8
    linalg.yield %w : i8
  }
  return
}
func.func @col_any_nan(%x: memref<8192x16xf32>, %m: memref<16xi8>) {
  linalg.generic {indexing_maps = [#lg_in, #lg_col], iterator_types = ["reduction", "parallel"]}
      ins(%x : memref<8192x16xf32>) outs(%m : memref<16xi8>) {
  ^bb0(%a: f32, %acc: i8):
    %t = arith.trunci %acc : i8 to i1
    %c = arith.cmpf uno, %a, %a : f32
    %r = arith.ori %t, %c : i1
    %w = arith.extui %r : i1 to i8
    linalg.yield %w : i8
  }
  return
}
// the accumulator is read twice: not a plain combine, stays one loop per thread
func.func @acc_read_twice(%x: memref<4x1024xf32>, %m: memref<4xi8>) {
  %z = arith.constant 0.0 : f32
  linalg.generic {indexing_maps = [#lg_in, #lg_row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x1024xf32>) outs(%m : memref<4xi8>) {
  ^bb0(%a: f32, %acc: i8):
    %t = arith.trunci %acc : i8 to i1
    %c = arith.cmpf ogt, %a, %z : f32
    %r = arith.andi %c, %t : i1
    %r2 = arith.xori %r, %t : i1
    %w = arith.extui %r2 : i1 to i8
    linalg.yield %w : i8
  }
  return
}

// -----
// An integer sum (a count of valid tokens) takes the same block reduction, with addi.
// CHECK-LABEL: func.func @count_valid(
// CHECK: gpu.launch
// CHECK:   scf.for {{.*}} -> (i64)
// CHECK:     arith.cmpi ne
// CHECK:     arith.extui
// CHECK:     arith.addi
// CHECK:   gpu.all_reduce add %{{.*}} uniform
// CHECK:   scf.if
// CHECK:     memref.load %arg1[]
// CHECK:     arith.addi
// CHECK-NOT: linalg.generic
func.func @count_valid(%t: memref<4096xi64>, %n: memref<i64>) -> memref<i64> {
  %ignore = arith.constant -100 : i64
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>], iterator_types = ["reduction"]} ins(%t : memref<4096xi64>) outs(%n : memref<i64>) {
  ^bb0(%a: i64, %o: i64):
    %v = arith.cmpi ne, %a, %ignore : i64
    %e = arith.extui %v : i1 to i64
    %s = arith.addi %e, %o : i64
    linalg.yield %s : i64
  }
  return %n : memref<i64>
}

// -----
// RMSNorm after a residual add: x = a + b (written), the row sum of squares into a zero
// fill, rstd = rsqrt(sum / n + eps) (finished by the storing lane), y = x * rstd * w (read).
// One launch of a warp per row: each lane computes, stores and sums its chunks of x, the
// storing lane hands the total to the row's lanes (gpu.shuffle idx), and the lanes read
// back the chunks they stored and store y; with row-readers=false row-writers=false the
// add and the normalization stay generics of their own.
#rn_rc = affine_map<(d0, d1) -> (d0, d1)>
#rn_r = affine_map<(d0, d1) -> (d0)>
#rn_c = affine_map<(d0, d1) -> (d1)>
#rn_v = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @rms_norm(
// CHECK: gpu.launch
// CHECK: %[[A:.*]] = vector.load %arg0
// CHECK: %[[B:.*]] = vector.load %arg1
// CHECK: vector.store %{{.*}}, %[[X:.*]][
// CHECK: gpu.shuffle  xor
// CHECK: %[[TOTAL:.*]] = scf.if
// CHECK: math.rsqrt
// CHECK: memref.store
// CHECK: %[[ALL:.*]], %{{.*}} = gpu.shuffle  idx %[[TOTAL]], %c0_i32
// CHECK: math.rsqrt
// CHECK: scf.for
// CHECK: vector.load %[[X]]
// CHECK: arith.truncf
// CHECK: vector.store %{{.*}} : memref<16x256xbf16>, vector<4xbf16>
// CHECK: gpu.terminator
// CHECK-NOT: linalg.generic {{.*}}ins(%arg0
// CHECK: return
// APART-LABEL: func.func @rms_norm(
// APART: linalg.generic {{.*}}ins(%arg0, %arg1
// APART: gpu.launch
// APART-NOT: gpu.shuffle  idx
// APART: gpu.terminator
// APART: linalg.generic
// APART: arith.truncf
func.func @rms_norm(%a: memref<16x256xf32>, %b: memref<16x256xbf16>, %w: memref<256xf32>,
                    %y: memref<16x256xbf16>) {
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 256.0 : f32
  %eps = arith.constant 1.0e-5 : f32
  %x = memref.alloc() : memref<16x256xf32>
  linalg.generic {indexing_maps = [#rn_rc, #rn_rc, #rn_rc], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : memref<16x256xf32>, memref<16x256xbf16>) outs(%x : memref<16x256xf32>) {
  ^bb0(%p: f32, %q: bf16, %o: f32):
    %e = arith.extf %q : bf16 to f32
    %t = arith.addf %p, %e : f32
    linalg.yield %t : f32
  }
  %s = memref.alloc() : memref<16xf32>
  linalg.generic {indexing_maps = [#rn_v], iterator_types = ["parallel"]} outs(%s : memref<16xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#rn_rc, #rn_r], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<16x256xf32>) outs(%s : memref<16xf32>) {
  ^bb0(%e: f32, %o: f32):
    %q = arith.mulf %e, %e : f32
    %t = arith.addf %q, %o : f32
    linalg.yield %t : f32
  }
  %r = memref.alloc() : memref<16xf32>
  linalg.generic {indexing_maps = [#rn_v, #rn_v], iterator_types = ["parallel"]}
      ins(%s : memref<16xf32>) outs(%r : memref<16xf32>) {
  ^bb0(%e: f32, %o: f32):
    %m = arith.divf %e, %n : f32
    %d = arith.addf %m, %eps : f32
    %q = math.rsqrt %d : f32
    linalg.yield %q : f32
  }
  linalg.generic {indexing_maps = [#rn_rc, #rn_r, #rn_c, #rn_rc], iterator_types = ["parallel", "parallel"]}
      ins(%x, %r, %w : memref<16x256xf32>, memref<16xf32>, memref<256xf32>) outs(%y : memref<16x256xbf16>) {
  ^bb0(%e: f32, %k: f32, %g: f32, %o: bf16):
    %p = arith.mulf %e, %k : f32
    %q = arith.mulf %p, %g : f32
    %t = arith.truncf %q : f32 to bf16
    linalg.yield %t : bf16
  }
  return
}
