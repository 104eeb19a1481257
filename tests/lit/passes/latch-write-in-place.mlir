// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-write-in-place)' | FileCheck %s
// An elementwise result next copied only into a view of another allocation is written into
// that view (reshaped back to its shape); a zero fill of the destination between the two
// moves in front.  With a memory plan (latch.offset), a destination whose slot overlaps a
// buffer the generic reads keeps its copy; so do results with another reader.

#id2 = affine_map<(d0, d1) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// The padded expert buffer of a MoE backward pass: cat([a + b, zero row]), the zeros
// filled before the copy.  The rows are the start of the buffer: an identity-layout view.
// CHECK-LABEL: func.func @padded_rows(
// CHECK-SAME: %[[A:.*]]: memref<2x3x4xf32>, %[[B:.*]]: memref<2x3x4xf32>)
// CHECK: %[[PAD:.*]] = memref.alloc() {latch.offset = 256 : i64} : memref<7x4xf32>
// CHECK-NEXT: linalg.generic {{.*}} outs(%[[PAD]] : memref<7x4xf32>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: linalg.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[AS3:.*]] = memref.reinterpret_cast %[[PAD]] to offset: [0], sizes: [2, 3, 4], strides: [12, 4, 1] : memref<7x4xf32> to memref<2x3x4xf32>
// CHECK-NEXT: linalg.generic {{.*}} ins(%[[A]], %[[B]] : memref<2x3x4xf32>, memref<2x3x4xf32>) outs(%[[AS3]] : memref<2x3x4xf32>)
// CHECK: arith.addf
// CHECK-NOT: linalg.generic
// CHECK: return %[[PAD]]
func.func @padded_rows(%a: memref<2x3x4xf32>, %b: memref<2x3x4xf32>) -> memref<7x4xf32> {
  %z = arith.constant 0.0 : f32
  %sum = memref.alloc() {latch.offset = 0 : i64} : memref<2x3x4xf32>
  linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%a, %b : memref<2x3x4xf32>, memref<2x3x4xf32>) outs(%sum : memref<2x3x4xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  }
  %flat = memref.collapse_shape %sum [[0, 1], [2]] : memref<2x3x4xf32> into memref<6x4xf32>
  %pad = memref.alloc() {latch.offset = 256 : i64} : memref<7x4xf32>
  linalg.generic {indexing_maps = [#id2], iterator_types = ["parallel", "parallel"]} outs(%pad : memref<7x4xf32>) {
  ^bb0(%o: f32):
    linalg.yield %z : f32
  }
  %rows = memref.subview %pad[0, 0] [6, 4] [1, 1] : memref<7x4xf32> to memref<6x4xf32, strided<[4, 1]>>
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%flat : memref<6x4xf32>) outs(%rows : memref<6x4xf32, strided<[4, 1]>>) {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  return %pad : memref<7x4xf32>
}

// -----
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#t = affine_map<(d0, d1, d2, d3) -> (d0, d2, d1, d3)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// Three head-major gradients transposed and put side by side (a fused q/k/v projection):
// the transpose writes its column block of the [B, T, 3·H·D] buffer (the blocks copied
// from arguments keep their copies, which write other columns in between).
// CHECK-LABEL: func.func @side_by_side(
// CHECK-SAME: %[[DK:.*]]: memref<2x2x3x4xf32>, %[[Q:.*]]: memref<2x3x8xf32>, %[[V:.*]]: memref<2x3x8xf32>)
// CHECK-NEXT: %[[QKV:.*]] = memref.alloc() {latch.offset = 4096 : i64} : memref<2x3x24xf32>
// CHECK-NEXT: %[[K:.*]] = memref.subview %[[QKV]][0, 0, 8] [2, 3, 8] [1, 1, 1] : memref<2x3x24xf32> to memref<2x3x8xf32, strided<[72, 24, 1], offset: 8>>
// CHECK-NEXT: %[[K4:.*]] = memref.expand_shape %[[K]] {{\[\[}}0], [1], [2, 3]] output_shape [2, 3, 2, 4] : memref<2x3x8xf32, strided<[72, 24, 1], offset: 8>> into memref<2x3x2x4xf32, strided<[72, 24, 4, 1], offset: 8>>
// CHECK-NEXT: linalg.generic {{.*}} ins(%[[DK]] : memref<2x2x3x4xf32>) outs(%[[K4]] : memref<2x3x2x4xf32, strided<[72, 24, 4, 1], offset: 8>>)
// CHECK-NOT: collapse_shape
// CHECK: linalg.generic {{.*}} ins(%[[Q]] : memref<2x3x8xf32>)
// CHECK-NOT: collapse_shape
// CHECK: linalg.generic {{.*}} ins(%[[V]] : memref<2x3x8xf32>)
// CHECK: return %[[QKV]]
func.func @side_by_side(%dk: memref<2x2x3x4xf32>, %q: memref<2x3x8xf32>, %v: memref<2x3x8xf32>) -> memref<2x3x24xf32> {
  %kt = memref.alloc() {latch.offset = 0 : i64} : memref<2x3x2x4xf32>
  linalg.generic {indexing_maps = [#t, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%dk : memref<2x2x3x4xf32>) outs(%kt : memref<2x3x2x4xf32>) {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  %k = memref.collapse_shape %kt [[0], [1], [2, 3]] : memref<2x3x2x4xf32> into memref<2x3x8xf32>
  %qkv = memref.alloc() {latch.offset = 4096 : i64} : memref<2x3x24xf32>
  %s0 = memref.subview %qkv[0, 0, 0] [2, 3, 8] [1, 1, 1] : memref<2x3x24xf32> to memref<2x3x8xf32, strided<[72, 24, 1]>>
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%q : memref<2x3x8xf32>) outs(%s0 : memref<2x3x8xf32, strided<[72, 24, 1]>>) {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  %s1 = memref.subview %qkv[0, 0, 8] [2, 3, 8] [1, 1, 1] : memref<2x3x24xf32> to memref<2x3x8xf32, strided<[72, 24, 1], offset: 8>>
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%k : memref<2x3x8xf32>) outs(%s1 : memref<2x3x8xf32, strided<[72, 24, 1], offset: 8>>) {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  %s2 = memref.subview %qkv[0, 0, 16] [2, 3, 8] [1, 1, 1] : memref<2x3x24xf32> to memref<2x3x8xf32, strided<[72, 24, 1], offset: 16>>
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : memref<2x3x8xf32>) outs(%s2 : memref<2x3x8xf32, strided<[72, 24, 1], offset: 16>>) {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  return %qkv : memref<2x3x24xf32>
}

// -----
#id2 = affine_map<(d0, d1) -> (d0, d1)>
// The destination's slot overlaps the buffer the generic reads (the plan reused it):
// writing it early would clobber the input, so the copy stays.
// CHECK-LABEL: func.func @slot_shared_with_input(
// CHECK: %[[T:.*]] = memref.alloc() {latch.offset = 512 : i64} : memref<6x4xf32>
// CHECK: linalg.generic {{.*}} outs(%[[T]] : memref<6x4xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[T]] : memref<6x4xf32>)
func.func @slot_shared_with_input(%a: memref<6x4xf32>) -> memref<7x4xf32> {
  %in = memref.alloc() {latch.offset = 0 : i64} : memref<6x4xf32>
  memref.copy %a, %in : memref<6x4xf32> to memref<6x4xf32>
  %t = memref.alloc() {latch.offset = 512 : i64} : memref<6x4xf32>
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%in : memref<6x4xf32>) outs(%t : memref<6x4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.mulf %x, %x : f32
    linalg.yield %s : f32
  }
  %pad = memref.alloc() {latch.offset = 0 : i64} : memref<7x4xf32>
  %rows = memref.subview %pad[0, 0] [6, 4] [1, 1] : memref<7x4xf32> to memref<6x4xf32, strided<[4, 1]>>
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%t : memref<6x4xf32>) outs(%rows : memref<6x4xf32, strided<[4, 1]>>) {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  return %pad : memref<7x4xf32>
}

// -----
#id2 = affine_map<(d0, d1) -> (d0, d1)>
// The result has a second reader: it must exist as it is, so the copy stays.
// CHECK-LABEL: func.func @read_twice(
// CHECK: %[[T:.*]] = memref.alloc() {latch.offset = 0 : i64} : memref<6x4xf32>
// CHECK: linalg.generic {{.*}} outs(%[[T]] : memref<6x4xf32>)
// CHECK: linalg.generic {{.*}} outs(%[[PAD:.*]] : memref<8x4xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[T]] : memref<6x4xf32>) outs(%{{.*}} : memref<6x4xf32, strided<[4, 1], offset: 4>>)
// CHECK: linalg.generic {{.*}} ins(%[[T]] : memref<6x4xf32>) outs(%{{.*}} : memref<6x4xf32>)
func.func @read_twice(%a: memref<6x4xf32>, %also: memref<6x4xf32>) -> memref<8x4xf32> {
  %z = arith.constant 0.0 : f32
  %t = memref.alloc() {latch.offset = 0 : i64} : memref<6x4xf32>
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%a : memref<6x4xf32>) outs(%t : memref<6x4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.mulf %x, %x : f32
    linalg.yield %s : f32
  }
  %pad = memref.alloc() {latch.offset = 256 : i64} : memref<8x4xf32>
  linalg.generic {indexing_maps = [#id2], iterator_types = ["parallel", "parallel"]} outs(%pad : memref<8x4xf32>) {
  ^bb0(%o: f32):
    linalg.yield %z : f32
  }
  %rows = memref.subview %pad[1, 0] [6, 4] [1, 1] : memref<8x4xf32> to memref<6x4xf32, strided<[4, 1], offset: 4>>
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%t : memref<6x4xf32>) outs(%rows : memref<6x4xf32, strided<[4, 1], offset: 4>>) {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%t : memref<6x4xf32>) outs(%also : memref<6x4xf32>) {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  return %pad : memref<8x4xf32>
}

// -----
// Before the memory plan (no latch.offset): memref.copy from a reshaped result, the
// destination zeroed from a global in between; the fill moves in front of the writer.
memref.global "private" constant @zeros : memref<5x8xf32> = dense<0.0>
#id1 = affine_map<(d0) -> (d0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @unplanned(
// CHECK: %[[Z:.*]] = memref.get_global @zeros
// CHECK: %[[D:.*]] = memref.alloc() : memref<5x8xf32>
// CHECK-NEXT: memref.copy %[[Z]], %[[D]]
// CHECK-NEXT: %[[FLAT:.*]] = memref.reinterpret_cast %[[D]] to offset: [0], sizes: [32], strides: [1] : memref<5x8xf32> to memref<32xf32>
// CHECK-NEXT: linalg.generic {{.*}} outs(%[[FLAT]] : memref<32xf32>)
// CHECK-NOT: memref.copy
// CHECK: return %[[D]]
func.func @unplanned(%x: memref<32xf32>) -> memref<5x8xf32> {
  %z = memref.get_global @zeros : memref<5x8xf32>
  %t = memref.alloc() : memref<32xf32>
  linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]} ins(%x : memref<32xf32>) outs(%t : memref<32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %e = math.exp %a : f32
    linalg.yield %e : f32
  }
  %t2 = memref.expand_shape %t [[0, 1]] output_shape [4, 8] : memref<32xf32> into memref<4x8xf32>
  %d = memref.alloc() : memref<5x8xf32>
  memref.copy %z, %d : memref<5x8xf32> to memref<5x8xf32>
  %top = memref.subview %d[0, 0] [4, 8] [1, 1] : memref<5x8xf32> to memref<4x8xf32, strided<[8, 1]>>
  memref.copy %t2, %top : memref<4x8xf32> to memref<4x8xf32, strided<[8, 1]>>
  return %d : memref<5x8xf32>
}
