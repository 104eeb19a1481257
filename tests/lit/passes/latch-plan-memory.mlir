// RUN: latch-opt %s --pass-pipeline='builtin.module(eliminate-empty-tensors, empty-tensor-to-alloc-tensor, one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}, latch-plan-memory)' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(eliminate-empty-tensors, empty-tensor-to-alloc-tensor, one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}, latch-plan-memory{alignment=8192})' | FileCheck %s --check-prefix=ALIGN
// RUN: latch-opt %s --pass-pipeline='builtin.module(eliminate-empty-tensors, empty-tensor-to-alloc-tensor, one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}, latch-plan-memory{materialize=true}, buffer-deallocation-pipeline)' | FileCheck %s --check-prefix=ARENA
// RUN: latch-opt %s --pass-pipeline='builtin.module(eliminate-empty-tensors, empty-tensor-to-alloc-tensor, one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}, latch-plan-memory{reuse-distance=2})' | FileCheck %s --check-prefix=DIST
// A chain exp -> sin -> cos -> add: three 4 KiB temporaries, never more than two live at
// once, fit in an 8 KiB arena (the first and third share offset 0); the result escapes
// through the return, so it is pinned and gets no arena slot.

// CHECK-LABEL: func.func @chain(
// CHECK-SAME: latch.arena_bytes = 8192 : i64, latch.buffer_bytes = 12288 : i64
// CHECK: memref.alloc() {{{.*}}latch.offset = 0 : i64}
// CHECK: memref.alloc() {{{.*}}latch.offset = 4096 : i64}
// CHECK: memref.alloc() {{{.*}}latch.offset = 0 : i64}
// CHECK: memref.alloc() {{{.*}}latch.pinned}
// CHECK: return
// ALIGN: latch.arena_bytes = 16384 : i64
// With reuse-distance=2 the first buffer's slot is not reused by the third, allocated
// within two ops of the first's last use (a write there would wait for that read on the
// GPU): three slots.
// DIST-LABEL: func.func @chain(
// DIST-SAME: latch.arena_bytes = 12288 : i64
// DIST: memref.alloc() {{{.*}}latch.offset = 0 : i64}
// DIST: memref.alloc() {{{.*}}latch.offset = 4096 : i64}
// DIST: memref.alloc() {{{.*}}latch.offset = 8192 : i64}
// With materialize=true the plan is carried out: one arena, views at the planned offsets,
// one dealloc; the escaping result keeps its own allocation.
// ARENA-LABEL: func.func @chain(
// ARENA: %[[ARENA:.*]] = memref.alloc() {alignment = 256 : i64} : memref<8192xi8>
// ARENA: %[[A:.*]] = memref.view %[[ARENA]][%{{.*}}][] : memref<8192xi8> to memref<1024xf32>
// ARENA: %[[B:.*]] = memref.view %[[ARENA]][%{{.*}}][] : memref<8192xi8> to memref<1024xf32>
// ARENA: outs(%[[A]] : memref<1024xf32>)
// ARENA: %[[OUT:.*]] = memref.alloc() {{.*}}latch.pinned
// ARENA: memref.dealloc %[[ARENA]] : memref<8192xi8>
// ARENA-NEXT: return %[[OUT]]
#id = affine_map<(d0) -> (d0)>
func.func @chain(%a: tensor<1024xf32>) -> tensor<1024xf32> {
  %e = tensor.empty() : tensor<1024xf32>
  %1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%a : tensor<1024xf32>) outs(%e : tensor<1024xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.exp %x : f32
    linalg.yield %s : f32
  } -> tensor<1024xf32>
  %e2 = tensor.empty() : tensor<1024xf32>
  %2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%1 : tensor<1024xf32>) outs(%e2 : tensor<1024xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.sin %x : f32
    linalg.yield %s : f32
  } -> tensor<1024xf32>
  %e3 = tensor.empty() : tensor<1024xf32>
  %3 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%2 : tensor<1024xf32>) outs(%e3 : tensor<1024xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.cos %x : f32
    linalg.yield %s : f32
  } -> tensor<1024xf32>
  %e4 = tensor.empty() : tensor<1024xf32>
  %4 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]} ins(%3, %a : tensor<1024xf32>, tensor<1024xf32>) outs(%e4 : tensor<1024xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<1024xf32>
  return %4 : tensor<1024xf32>
}
