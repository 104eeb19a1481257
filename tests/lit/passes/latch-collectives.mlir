// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-lower-collectives)' | FileCheck %s --check-prefix=LOWER
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-lower-collectives, eliminate-empty-tensors, empty-tensor-to-alloc-tensor, one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}, canonicalize, cse, latch-schedule-collectives)' | FileCheck %s --check-prefix=SCHED
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-lower-collectives, eliminate-empty-tensors, empty-tensor-to-alloc-tensor, one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}, canonicalize, cse)' | FileCheck %s --check-prefix=UNSCHED
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-bufferize)' | FileCheck %s --check-prefix=PLAN
//
// Two gradient buckets of a data-parallel update.  %g1 (bucket 0, with the loss) is final
// right after the first generic; %g0 (bucket 1) needs the rest of the "backward pass".
//
// latch-lower-collectives: one flat buffer per bucket, each value copied into a 256-byte
// aligned slice, the buffer-form all-reduce, tensors read back from the slices.
// LOWER-LABEL: func.func @update(
// LOWER: %[[B0:.+]] = memref.alloc() {alignment = 256 : i64} : memref<128xf32>
// LOWER: %[[S0:.+]] = memref.reinterpret_cast %[[B0]] to offset: [0], sizes: [], strides: [] : memref<128xf32> to memref<f32, strided<[]>>
// LOWER: %[[L:.+]] = bufferization.to_buffer %{{.+}} read_only : tensor<f32> to memref<f32>
// LOWER: memref.copy %[[L]], %[[S0]]
// LOWER: %[[S1:.+]] = memref.reinterpret_cast %[[B0]] to offset: [64], sizes: [16], strides: [1] : memref<128xf32> to memref<16xf32, strided<[1], offset: 64>>
// LOWER: memref.copy %{{.+}}, %[[S1]]
// LOWER: "latch.all_reduce"(%[[B0]]) {bucket = 0 : i64, reduction = "mean"} : (memref<128xf32>) -> ()
// LOWER: bufferization.to_tensor %[[S0]] restrict
// LOWER: bufferization.to_tensor %[[S1]] restrict
// LOWER: memref.alloc() {alignment = 256 : i64} : memref<64xf32>
// LOWER: "latch.all_reduce"(%{{.+}}) {bucket = 1 : i64, reduction = "mean"} : (memref<64xf32>) -> ()
// LOWER-NOT: "latch.all_reduce"(%{{.+}}) : (tensor
//
// Without scheduling, both buckets wait for the whole backward pass (after the last sin).
// UNSCHED-LABEL: func.func @update(
// UNSCHED: math.sin
// UNSCHED: math.sin
// UNSCHED: "latch.all_reduce"({{.+}}) {bucket = 0
//
// latch-schedule-collectives: the loss (an argument here) is copied into bucket 0 first
// thing, %g1 as soon as it is written, and bucket 0 is reduced before the two sin generics
// that finish %g0; bucket 1 right after them.
// SCHED-LABEL: func.func @update(
// SCHED-NEXT: %[[B0:.+]] = memref.alloc() {alignment = 256 : i64} : memref<128xf32>
// SCHED: memref.copy %arg1
// SCHED: math.exp
// SCHED: memref.copy
// SCHED-NEXT: "latch.all_reduce"(%[[B0]]) {bucket = 0 : i64, reduction = "mean"}
// SCHED: math.sin
// SCHED: math.sin
// SCHED: memref.copy
// SCHED-NEXT: "latch.all_reduce"(%{{.+}}) {bucket = 1 : i64, reduction = "mean"}
// SCHED: math.sqrt
//
// In latch-bufferize the buckets are planned like any buffer (live from their first copy
// to the rule's last read); bucket 0 holds the returned loss, so it is pinned.
// PLAN-LABEL: func.func @update(
// PLAN: memref.alloc() {alignment = 256 : i64, latch.pinned} : memref<128xf32>
// PLAN: "latch.all_reduce"
// PLAN: memref.alloc() {alignment = 256 : i64, latch.offset = {{[0-9]+}} : i64} : memref<64xf32>
// PLAN: "latch.all_reduce"
#id = affine_map<(d0) -> (d0)>
func.func @update(%x: tensor<16xf32>, %loss: tensor<f32>) -> (tensor<16xf32>, tensor<16xf32>, tensor<f32>) {
  %e = tensor.empty() : tensor<16xf32>
  %g1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%x : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.exp %a : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  %e1 = tensor.empty() : tensor<16xf32>
  %t = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%x : tensor<16xf32>) outs(%e1 : tensor<16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.sin %a : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  %e2 = tensor.empty() : tensor<16xf32>
  %g0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%t : tensor<16xf32>) outs(%e2 : tensor<16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.sin %a : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  %r:2 = "latch.all_reduce"(%loss, %g1) {bucket = 0 : i64, reduction = "mean"} : (tensor<f32>, tensor<16xf32>) -> (tensor<f32>, tensor<16xf32>)
  %r1 = "latch.all_reduce"(%g0) {bucket = 1 : i64, reduction = "mean"} : (tensor<16xf32>) -> tensor<16xf32>
  %e3 = tensor.empty() : tensor<16xf32>
  %n0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%r1 : tensor<16xf32>) outs(%e3 : tensor<16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.sqrt %a : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  %e4 = tensor.empty() : tensor<16xf32>
  %n1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%r#1 : tensor<16xf32>) outs(%e4 : tensor<16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.sqrt %a : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  return %n0, %n1, %r#0 : tensor<16xf32>, tensor<16xf32>, tensor<f32>
}
