// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-lower-schedules)' | FileCheck %s
// latch.warmup_cosine becomes f64 scalar arithmetic on the extracted step, truncated to
// tensor<f32>: a linear warmup selected for step < warmup_steps, else the clamped cosine.

// CHECK-LABEL: func.func @warmup_cosine(
// CHECK-SAME: %[[S:.*]]: tensor<i64>) -> tensor<f32>
// CHECK-NOT: latch.warmup_cosine
// CHECK: %[[I:.*]] = tensor.extract %[[S]][] : tensor<i64>
// CHECK: %[[F:.*]] = arith.sitofp %[[I]] : i64 to f64
// CHECK: arith.minimumf
// CHECK: math.cos %{{.*}} : f64
// CHECK: %[[W:.*]] = arith.constant 10 : i64
// CHECK: %[[C:.*]] = arith.cmpi slt, %[[I]], %[[W]] : i64
// CHECK: %[[LR:.*]] = arith.select %[[C]], %{{.*}}, %{{.*}} : f64
// CHECK: %[[T:.*]] = arith.truncf %[[LR]] : f64 to f32
// CHECK: %[[R:.*]] = tensor.from_elements %[[T]] : tensor<f32>
// CHECK: return %[[R]] : tensor<f32>
func.func @warmup_cosine(%step: tensor<i64>) -> tensor<f32> {
  %0 = "latch.warmup_cosine"(%step) {peak = 1.0e-03 : f64, warmup_steps = 10 : i64, total_steps = 100 : i64, final_ratio = 0.1 : f64} : (tensor<i64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// No warmup: no select, cosine only.
// CHECK-LABEL: func.func @cosine_only(
// CHECK-NOT: arith.select
// CHECK: math.cos
// CHECK: return
func.func @cosine_only(%step: tensor<i64>) -> tensor<f32> {
  %0 = "latch.warmup_cosine"(%step) {peak = 0.5 : f64, warmup_steps = 0 : i64, total_steps = 50 : i64, final_ratio = 0.0 : f64} : (tensor<i64>) -> tensor<f32>
  return %0 : tensor<f32>
}
