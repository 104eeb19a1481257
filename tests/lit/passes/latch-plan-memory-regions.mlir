// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-plan-memory)' | FileCheck %s
// A buffer that flows out of a region (scf.yield -> scf.if result) may be read after its
// last direct use, so it is pinned instead of sharing arena space; a buffer used only
// inside the region is planned normally.

// CHECK-LABEL: func.func @select(
// CHECK-SAME: latch.arena_bytes = 256 : i64, latch.buffer_bytes = 256 : i64
// CHECK: %[[A:.*]] = memref.alloc() {latch.pinned} : memref<16xf32>
// CHECK: %[[B:.*]] = memref.alloc() {latch.offset = 0 : i64} : memref<16xf32>
func.func @select(%c: i1, %x: memref<16xf32>, %out: memref<16xf32>) {
  %a = memref.alloc() : memref<16xf32>
  %b = memref.alloc() : memref<16xf32>
  memref.copy %x, %b : memref<16xf32> to memref<16xf32>
  %r = scf.if %c -> memref<16xf32> {
    memref.copy %b, %a : memref<16xf32> to memref<16xf32>
    scf.yield %a : memref<16xf32>
  } else {
    scf.yield %x : memref<16xf32>
  }
  memref.copy %r, %out : memref<16xf32> to memref<16xf32>
  return
}
