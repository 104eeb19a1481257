// RUN: latch-opt %s --split-input-file | latch-opt --split-input-file | FileCheck %s
// The learning-rule ops print and parse back unchanged, attributes and types included.

// CHECK-LABEL: sym_name = "sgd_w"
// CHECK: %[[P:.+]] = "latch.sgd"(%[[W:.+]], %[[G:.+]], %[[LR:.+]]) {momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 1.000000e-02 : f64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK: %[[R:.+]]:2 = "latch.sgd"(%[[P]], %[[G]], %[[LR]], %[[B:.+]]) {momentum = 9.000000e-01 : f64, nesterov = true, weight_decay = 0.000000e+00 : f64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<f32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: "latch.write"(%[[R]]#0) {state = @sgd_w}
// CHECK: "latch.write"(%[[R]]#1) {state = @sgd_buf}
"latch.state"() {sym_name = "sgd_w", type = tensor<4x8xf32>, kind = "param"} : () -> ()
"latch.state"() {sym_name = "sgd_buf", type = tensor<4x8xf32>, kind = "moment"} : () -> ()
"latch.update"() ({
^bb0(%g: tensor<4x8xf32>, %lr: tensor<f32>):
  %w = "latch.read"() {state = @sgd_w} : () -> tensor<4x8xf32>
  %b = "latch.read"() {state = @sgd_buf} : () -> tensor<4x8xf32>
  %p = "latch.sgd"(%w, %g, %lr) {momentum = 0.0 : f64, weight_decay = 0.01 : f64, nesterov = false} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %p2, %b2 = "latch.sgd"(%p, %g, %lr, %b) {momentum = 0.9 : f64, weight_decay = 0.0 : f64, nesterov = true} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<f32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  "latch.write"(%p2) {state = @sgd_w} : (tensor<4x8xf32>) -> ()
  "latch.write"(%b2) {state = @sgd_buf} : (tensor<4x8xf32>) -> ()
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "sgd_train"} : () -> ()

// -----

// CHECK-LABEL: sym_name = "adamw_w"
// CHECK: %[[R:.+]]:3 = "latch.adamw"(%[[W:.+]], %[[G:.+]], %[[M:.+]], %[[V:.+]], %[[LR:.+]], %[[T:.+]]) {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-01 : f64} : (tensor<16xbf16>, tensor<16xbf16>, tensor<16xbf16>, tensor<16xbf16>, tensor<f32>, tensor<i64>) -> (tensor<16xbf16>, tensor<16xbf16>, tensor<16xbf16>)
// CHECK: "latch.write"(%[[R]]#0) {state = @adamw_w}
// CHECK: "latch.write"(%[[R]]#1) {state = @adamw_m}
// CHECK: "latch.write"(%[[R]]#2) {state = @adamw_v}
"latch.state"() {sym_name = "adamw_w", type = tensor<16xbf16>, kind = "param"} : () -> ()
"latch.state"() {sym_name = "adamw_m", type = tensor<16xbf16>, kind = "moment"} : () -> ()
"latch.state"() {sym_name = "adamw_v", type = tensor<16xbf16>, kind = "moment"} : () -> ()
"latch.update"() ({
^bb0(%g: tensor<16xbf16>, %lr: tensor<f32>, %t: tensor<i64>):
  %w = "latch.read"() {state = @adamw_w} : () -> tensor<16xbf16>
  %m = "latch.read"() {state = @adamw_m} : () -> tensor<16xbf16>
  %v = "latch.read"() {state = @adamw_v} : () -> tensor<16xbf16>
  %w2, %m2, %v2 = "latch.adamw"(%w, %g, %m, %v, %lr, %t) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64} : (tensor<16xbf16>, tensor<16xbf16>, tensor<16xbf16>, tensor<16xbf16>, tensor<f32>, tensor<i64>) -> (tensor<16xbf16>, tensor<16xbf16>, tensor<16xbf16>)
  "latch.write"(%w2) {state = @adamw_w} : (tensor<16xbf16>) -> ()
  "latch.write"(%m2) {state = @adamw_m} : (tensor<16xbf16>) -> ()
  "latch.write"(%v2) {state = @adamw_v} : (tensor<16xbf16>) -> ()
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "adamw_train"} : () -> ()

// -----

// Clipping takes gradients of different shapes and element types; the schedule and
// accumulation ops.
// CHECK-LABEL: sym_name = "clip_acc"
// CHECK: %[[C:.+]]:3 = "latch.clip_global_norm"(%[[A:.+]], %[[B:.+]]) {max_norm = 1.000000e+00 : f64} : (tensor<4x8xf32>, tensor<3xbf16>) -> (tensor<4x8xf32>, tensor<3xbf16>, tensor<f32>)
// CHECK: %[[LR:.+]] = "latch.warmup_cosine"(%[[S:.+]]) {final_ratio = 1.000000e-01 : f64, peak = 3.000000e-04 : f64, total_steps = 1000 : i64, warmup_steps = 100 : i64} : (tensor<i64>) -> tensor<f32>
// CHECK: %[[N:.+]] = "latch.accumulate"(%[[ACC:.+]], %[[C]]#0) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK: "latch.return"(%[[C]]#2, %[[LR]], %[[C]]#1)
"latch.state"() {sym_name = "clip_acc", type = tensor<4x8xf32>, kind = "grad_acc"} : () -> ()
"latch.update"() ({
^bb0(%a: tensor<4x8xf32>, %b: tensor<3xbf16>, %s: tensor<i64>):
  %g:2, %norm = "latch.clip_global_norm"(%a, %b) {max_norm = 1.0 : f64} : (tensor<4x8xf32>, tensor<3xbf16>) -> (tensor<4x8xf32>, tensor<3xbf16>, tensor<f32>)
  %lr = "latch.warmup_cosine"(%s) {peak = 3.0e-4 : f64, warmup_steps = 100 : i64, total_steps = 1000 : i64, final_ratio = 0.1 : f64} : (tensor<i64>) -> tensor<f32>
  %acc = "latch.read"() {state = @clip_acc} : () -> tensor<4x8xf32>
  %acc2 = "latch.accumulate"(%acc, %g#0) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  "latch.write"(%acc2) {state = @clip_acc} : (tensor<4x8xf32>) -> ()
  "latch.return"(%norm, %lr, %g#1) : (tensor<f32>, tensor<f32>, tensor<3xbf16>) -> ()
}) {sym_name = "clip_train"} : () -> ()
