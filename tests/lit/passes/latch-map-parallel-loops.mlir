// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-map-parallel-loops{vector=false})' | FileCheck %s
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-map-parallel-loops{block=64 vector=false})' | FileCheck %s --check-prefix=B64
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-map-parallel-loops{per-thread=4 min-blocks=1 vector=false},canonicalize,cse)' | FileCheck %s --check-prefix=E4
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-map-parallel-loops{min-blocks=1},canonicalize,cse)' | FileCheck %s --check-prefix=VEC
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-map-parallel-loops{min-blocks=1 whole-stores=false},canonicalize,cse)' | FileCheck %s --check-prefix=SPLIT
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-map-parallel-loops{min-blocks=1 guard-loads=false},canonicalize,cse)' | FileCheck %s --check-prefix=NOGUARD
// Each top-level scf.parallel with constant bounds becomes one 1-D gpu.launch over its
// flattened iteration space, the first loop varying fastest; lower bounds and steps are
// applied after the split; threads past the end are masked.  Here (1..10 step 3) x
// (1..9 step 2) = 3 x 4 = 12 iterations: one block of 32 threads (12 rounded up to a
// warp); i = 1 + 3 * (t % 3), j = 1 + 2 * (t / 3).

// CHECK-LABEL: func.func @steps(
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %[[ONE:.*]], {{.*}}) threads(%[[T:.*]], %{{.*}}, %{{.*}}) in ({{.*}} = %c32,
// CHECK: %[[IN:.*]] = arith.cmpi ult, %[[T]], %c12
// CHECK: scf.if %[[IN]]
// CHECK: %[[C3:.*]] = arith.constant 3 : index
// CHECK: %[[I0:.*]] = arith.remui %[[T]], %[[C3]] : index
// CHECK: %[[J0:.*]] = arith.divui %[[T]], %[[C3]] : index
// CHECK: %[[I1:.*]] = arith.muli %[[I0]], %{{.*}} : index
// CHECK: %[[I:.*]] = arith.addi %[[I1]], %{{.*}} : index
// CHECK: %[[S2:.*]] = arith.constant 2 : index
// CHECK: %[[J1:.*]] = arith.muli %[[J0]], %[[S2]] : index
// CHECK: %[[J:.*]] = arith.addi %[[J1]], %{{.*}} : index
// CHECK: memref.store %{{.*}}, %arg0[%[[I]], %[[J]]]
// CHECK-NOT: scf.parallel
func.func @steps(%a: memref<10x9xf32>) {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c10 = arith.constant 10 : index
  %c9 = arith.constant 9 : index
  %z = arith.constant 0.0 : f32
  scf.parallel (%i, %j) = (%c1, %c1) to (%c10, %c9) step (%c3, %c2) {
    memref.store %z, %a[%i, %j] : memref<10x9xf32>
    scf.reduce
  }
  return
}

// -----
// 1000 iterations: 4 blocks of 256 threads (block=64: 16 blocks of 64), masked past 1000.
// CHECK-LABEL: func.func @thousand(
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %c4, {{.*}}) threads({{.*}}) in ({{.*}} = %c256,
// CHECK: arith.cmpi ult, %{{.*}}, %c1000
// B64-LABEL: func.func @thousand(
// B64: gpu.launch blocks({{.*}}) in ({{.*}} = %c16, {{.*}}) threads({{.*}}) in ({{.*}} = %c64,
func.func @thousand(%a: memref<1000xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1000 : index
  %z = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    memref.store %z, %a[%i] : memref<1000xf32>
    scf.reduce
  }
  return
}

// -----
// A loop with a run-time bound is left to the upstream mapping passes that follow in
// latch-form-kernels.
// CHECK-LABEL: func.func @dynamic(
// CHECK-NOT: gpu.launch
// CHECK: scf.parallel
func.func @dynamic(%a: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    memref.store %z, %a[%i] : memref<?xf32>
    scf.reduce
  }
  return
}

// -----
// Several iterations per thread (per-thread=4 min-blocks=1; by default a kernel needs
// 2048 blocks after the split): 4 x 1024 iterations -> 4 blocks of 256 threads, each
// covering 1024 consecutive iterations in 4 coalesced steps; the block's span lies within a
// row, so the later steps only move the column index.  The in-place update reads y where
// it writes it, so all 8 loads come before the arithmetic and stores.
// By default the 16 blocks are too few to split: one iteration per thread.
// CHECK-LABEL: func.func @axpy(
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %c16, {{.*}}) threads({{.*}}) in ({{.*}} = %c256,
// CHECK-COUNT-2: memref.load
// CHECK-NOT: memref.load
// CHECK: gpu.terminator
// E4-LABEL: func.func @axpy(
// E4: gpu.launch blocks({{.*}}) in ({{.*}} = %c4, {{.*}}) threads({{.*}}) in ({{.*}} = %c256,
// E4: %[[B:.*]] = arith.muli %{{.*}}, %c1024
// E4: %[[L:.*]] = arith.addi %[[B]], %{{.*}}
// E4: %[[J:.*]] = arith.remui %[[L]], %c1024
// E4: %[[I:.*]] = arith.divui %[[L]], %c1024
// E4: %[[J1:.*]] = arith.addi %[[J]], %c256
// E4: %[[J2:.*]] = arith.addi %[[J]], %c512
// E4: %[[J3:.*]] = arith.addi %[[J]], %c768
// E4-COUNT-8: memref.load
// E4: arith.mulf
// E4: memref.store %{{.*}}, %arg1[%[[I]], %[[J]]]
// E4: memref.store %{{.*}}, %arg1[%[[I]], %[[J1]]]
// E4: memref.store %{{.*}}, %arg1[%[[I]], %[[J2]]]
// E4: memref.store %{{.*}}, %arg1[%[[I]], %[[J3]]]
// E4-NOT: memref.load
// E4: gpu.terminator
func.func @axpy(%x: memref<4x1024xf32>, %y: memref<4x1024xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c1024 = arith.constant 1024 : index
  %two = arith.constant 2.0 : f32
  scf.parallel (%j, %i) = (%c0, %c0) to (%c1024, %c4) step (%c1, %c1) {
    %a = memref.load %x[%i, %j] : memref<4x1024xf32>
    %b = memref.load %y[%i, %j] : memref<4x1024xf32>
    %m = arith.mulf %a, %two : f32
    %s = arith.addf %m, %b : f32
    memref.store %s, %y[%i, %j] : memref<4x1024xf32>
    scf.reduce
  }
  return
}

// -----
// An iteration reads an element another one writes (y[i+1] -> y[i], through a view of
// the same buffer): the 2 iterations of each thread run one after the other, load then
// store.  512 iterations do not fill whole blocks of 4 x 256, so 2 per thread.
// E4-LABEL: func.func @shifted(
// E4: gpu.launch blocks({{.*}}) in ({{.*}} = %c1, {{.*}}) threads({{.*}}) in ({{.*}} = %c256,
// E4: memref.load
// E4-NEXT: memref.store
// E4: memref.load
// E4-NEXT: memref.store
// E4-NEXT: gpu.terminator
func.func @shifted(%y: memref<513xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 512 : index
  %v = memref.subview %y[1] [512] [1] : memref<513xf32> to memref<512xf32, strided<[1], offset: 1>>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %a = memref.load %v[%i] : memref<512xf32, strided<[1], offset: 1>>
    memref.store %a, %y[%i] : memref<513xf32>
    scf.reduce
  }
  return
}

// -----
// A body with a loop in it keeps one iteration per thread.
// E4-LABEL: func.func @rows(
// E4: gpu.launch blocks({{.*}}) in ({{.*}} = %c4, {{.*}}) threads({{.*}}) in ({{.*}} = %c256,
// E4: scf.for
// E4-NOT: scf.for
func.func @rows(%x: memref<1024x8xf32>, %y: memref<1024xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %n = arith.constant 1024 : index
  %z = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %s = scf.for %k = %c0 to %c8 step %c1 iter_args(%acc = %z) -> f32 {
      %a = memref.load %x[%i, %k] : memref<1024x8xf32>
      %t = arith.addf %acc, %a : f32
      scf.yield %t : f32
    }
    memref.store %s, %y[%i] : memref<1024xf32>
    scf.reduce
  }
  return
}

// -----
// Vector lanes (the default): the fastest loop walks the contiguous last dimension of
// both buffers, so each thread takes eight consecutive bf16 elements (16 bytes) at once,
// and four such vectors per thread (coalesced sweeps of the block): 12 x 4096 elements =
// 6144 vectors = 6 blocks of 256 threads.
// VEC-LABEL: func.func @bf16_rows(
// VEC: gpu.launch blocks({{.*}}) in ({{.*}} = %c6, {{.*}}) threads({{.*}}) in ({{.*}} = %c256,
// VEC-COUNT-4: vector.load %{{.*}} {alignment = 16 : i64} : memref<12x4096xbf16>, vector<8xbf16>
// VEC-COUNT-4: vector.store %{{.*}} {alignment = 16 : i64} : memref<12x4096xbf16>, vector<8xbf16>
// E4-LABEL: func.func @bf16_rows(
func.func @bf16_rows(%x: memref<12x4096xbf16>, %y: memref<12x4096xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c12 = arith.constant 12 : index
  %c4096 = arith.constant 4096 : index
  scf.parallel (%j, %i) = (%c0, %c0) to (%c4096, %c12) step (%c1, %c1) {
    %v = memref.load %x[%i, %j] : memref<12x4096xbf16>
    %w = arith.negf %v : bf16
    memref.store %w, %y[%i, %j] : memref<12x4096xbf16>
    scf.reduce
  }
  return
}

// -----
// An optimizer-like body: a bf16 gradient read beside f32 state that is read and stored.
// Lanes are set by the narrowest element (bf16: 8) only as far as every store stays one
// 16-byte access: the f32 stores allow 4 lanes (a warp's store then covers 512 contiguous
// bytes; with 8 lanes each thread would store 32 bytes in two pieces, every store
// instruction writing half of each 32-byte sector it touches).  whole-stores=false: 8.
// VEC-LABEL: func.func @state_step(
// VEC: vector.load %{{.*}} : memref<4096xbf16>, vector<4xbf16>
// VEC: vector.load %{{.*}} : memref<4096xf32>, vector<4xf32>
// VEC: vector.store %{{.*}} : memref<4096xf32>, vector<4xf32>
// VEC-NOT: vector<8x
// SPLIT-LABEL: func.func @state_step(
// SPLIT: vector.load %{{.*}} : memref<4096xbf16>, vector<8xbf16>
// SPLIT: vector.load %{{.*}} : memref<4096xf32>, vector<8xf32>
// SPLIT: vector.store %{{.*}} : memref<4096xf32>, vector<8xf32>
// E4-LABEL: func.func @state_step(
func.func @state_step(%g: memref<4096xbf16>, %m: memref<4096xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4096 = arith.constant 4096 : index
  scf.parallel (%i) = (%c0) to (%c4096) step (%c1) {
    %a = memref.load %g[%i] : memref<4096xbf16>
    %b = memref.load %m[%i] : memref<4096xf32>
    %ae = arith.extf %a : bf16 to f32
    %s = arith.addf %ae, %b : f32
    memref.store %s, %m[%i] : memref<4096xf32>
    scf.reduce
  }
  return
}

// -----
// A bf16 result from f32 inputs keeps 8 lanes: its store is 16 bytes; the f32 loads take
// two pieces each (the second half of each sector is then read from L1).
// VEC-LABEL: func.func @round_rows(
// VEC: vector.load %{{.*}} : memref<4096xf32>, vector<8xf32>
// VEC: vector.store %{{.*}} : memref<4096xbf16>, vector<8xbf16>
// E4-LABEL: func.func @round_rows(
func.func @round_rows(%x: memref<4096xf32>, %y: memref<4096xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4096 = arith.constant 4096 : index
  scf.parallel (%i) = (%c0) to (%c4096) step (%c1) {
    %a = memref.load %x[%i] : memref<4096xf32>
    %r = arith.truncf %a : f32 to bf16
    memref.store %r, %y[%i] : memref<4096xbf16>
    scf.reduce
  }
  return
}

// -----
// A load read only through select(row < extent[e], x, 0) (an elementwise kernel between
// expert products: latch-form-contraction-kernels{empty-row-loads}) is issued only where
// the condition holds: the condition (the extent's load, its compare) comes first, the
// guarded load is an scf.if yielding 0 elsewhere.  Vector lanes with 4 iterations a thread
// (VEC), scalar iterations 4 a thread, every iteration's condition before every guarded
// load (E4), one scalar iteration a thread, guarded in place (CHECK); guard-loads=false
// loads everywhere (NOGUARD).
// VEC-LABEL: func.func @padding_rows(
// VEC: %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : vector<4xf32>
// VEC: memref.load %{{.*}} : memref<2xi32>
// VEC: %[[LIVE:.*]] = arith.cmpi ult
// VEC: scf.if %[[LIVE]] -> (vector<4xf32>)
// VEC-NEXT: vector.load %{{.*}} : memref<2x8x512xf32>, vector<4xf32>
// VEC: else
// VEC-NEXT: scf.yield %[[ZERO]] : vector<4xf32>
// VEC: vector.store %{{.*}} : memref<2x8x512xf32>, vector<4xf32>
// E4-LABEL: func.func @padding_rows(
// E4-COUNT-4: memref.load %{{.*}} : memref<2xi32>
// E4: scf.if %{{.*}} -> (f32)
// E4-NEXT: memref.load %{{.*}} : memref<2x8x512xf32>
// E4-COUNT-3: scf.if %{{.*}} -> (f32)
// CHECK-LABEL: func.func @padding_rows(
// CHECK: memref.load %{{.*}} : memref<2xi32>
// CHECK: %[[LIVE:.*]] = arith.cmpi ult
// CHECK: scf.if %[[LIVE]] -> (f32)
// CHECK-NEXT: memref.load %{{.*}} : memref<2x8x512xf32>
// NOGUARD-LABEL: func.func @padding_rows(
// NOGUARD-NOT: scf.if
// NOGUARD: return
func.func @padding_rows(%x: memref<2x8x512xf32>, %ext: memref<2xi32>, %y: memref<2x8x512xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %c512 = arith.constant 512 : index
  %zero = arith.constant 0.0 : f32
  %two = arith.constant 2.0 : f32
  scf.parallel (%c, %r, %e) = (%c0, %c0, %c0) to (%c512, %c8, %c2) step (%c1, %c1, %c1) {
    %v = memref.load %x[%e, %r, %c] : memref<2x8x512xf32>
    %n = memref.load %ext[%e] : memref<2xi32>
    %end = arith.index_cast %n : i32 to index
    %live = arith.cmpi ult, %r, %end : index
    %s = arith.select %live, %v, %zero : f32
    %d = arith.mulf %s, %two : f32
    memref.store %d, %y[%e, %r, %c] : memref<2x8x512xf32>
    scf.reduce
  }
  return
}

// -----
// The condition reads a buffer the body stores to: it may not move to the front, so the
// load stays unguarded.
// CHECK-LABEL: func.func @condition_from_a_stored_buffer(
// CHECK-NOT: scf.if %{{.*}} -> (f32)
// CHECK: return
func.func @condition_from_a_stored_buffer(%x: memref<2x8x512xf32>, %ext: memref<2x8x512xi32>, %y: memref<2x8x512xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %c512 = arith.constant 512 : index
  %zero = arith.constant 0.0 : f32
  %none = arith.constant 0 : i32
  scf.parallel (%c, %r, %e) = (%c0, %c0, %c0) to (%c512, %c8, %c2) step (%c1, %c1, %c1) {
    memref.store %none, %ext[%e, %r, %c] : memref<2x8x512xi32>
    %v = memref.load %x[%e, %r, %c] : memref<2x8x512xf32>
    %n = memref.load %ext[%e, %r, %c0] : memref<2x8x512xi32>
    %end = arith.index_cast %n : i32 to index
    %live = arith.cmpi ult, %r, %end : index
    %s = arith.select %live, %v, %zero : f32
    memref.store %s, %y[%e, %r, %c] : memref<2x8x512xf32>
    scf.reduce
  }
  return
}
