// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-lower-state)' | FileCheck %s
// The state declarations and the update become one function:
//   @train(state values in declaration order..., inputs...) -> (new states..., loss, extras...)
// reads are the state arguments, writes the state results; "b" is never written, so it
// passes through; latch.abi names the layout.

// CHECK-NOT: latch.state
// CHECK-LABEL: func.func @train(
// CHECK-SAME: %[[W:[^:]*]]: tensor<4x3xf32>, %[[B:[^:]*]]: tensor<3xf32>, %[[STEP:[^:]*]]: tensor<i64>, %[[M:[^:]*]]: tensor<4x3xf32>, %[[X:[^:]*]]: tensor<2x4xf32>)
// CHECK-SAME: -> (tensor<4x3xf32>, tensor<3xf32>, tensor<i64>, tensor<4x3xf32>, tensor<f32>, tensor<2x4xf32>)
// CHECK-SAME: latch.abi = {num_inputs = 1 : i64, num_returns = 2 : i64, states = [{kind = "param", name = "w", type = tensor<4x3xf32>}, {kind = "param", name = "b", type = tensor<3xf32>}, {kind = "counter", name = "step", type = tensor<i64>}, {kind = "moment", name = "w.momentum_buffer", type = tensor<4x3xf32>}]}
// CHECK: %[[L:.*]] = arith.constant dense<0.000000e+00> : tensor<f32>
// CHECK: %[[G:.*]] = arith.mulf %[[W]], %[[W]] : tensor<4x3xf32>
// CHECK: %[[U:.*]]:2 = "latch.sgd"(%[[W]], %[[G]], %{{.*}}, %[[M]])
// CHECK: %[[S:.*]] = arith.addi %[[STEP]], %{{.*}} : tensor<i64>
// CHECK-NOT: latch.read
// CHECK-NOT: latch.write
// CHECK: return %[[U]]#0, %[[B]], %[[S]], %[[U]]#1, %[[L]], %[[X]] : tensor<4x3xf32>, tensor<3xf32>, tensor<i64>, tensor<4x3xf32>, tensor<f32>, tensor<2x4xf32>
module {
  "latch.state"() {sym_name = "w", type = tensor<4x3xf32>, kind = "param"} : () -> ()
  "latch.state"() {sym_name = "b", type = tensor<3xf32>, kind = "param"} : () -> ()
  "latch.state"() {sym_name = "step", type = tensor<i64>, kind = "counter"} : () -> ()
  "latch.state"() {sym_name = "w.momentum_buffer", type = tensor<4x3xf32>, kind = "moment"} : () -> ()
  "latch.update"() ({
  ^bb0(%x: tensor<2x4xf32>):
    %w = "latch.read"() {state = @w} : () -> tensor<4x3xf32>
    %b = "latch.read"() {state = @b} : () -> tensor<3xf32>
    %s = "latch.read"() {state = @step} : () -> tensor<i64>
    %m = "latch.read"() {state = @"w.momentum_buffer"} : () -> tensor<4x3xf32>
    %loss = arith.constant dense<0.0> : tensor<f32>
    %g = arith.mulf %w, %w : tensor<4x3xf32>
    %lr = arith.constant dense<0.1> : tensor<f32>
    %u:2 = "latch.sgd"(%w, %g, %lr, %m) {momentum = 0.9 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>, tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>)
    %one = arith.constant dense<1> : tensor<i64>
    %s1 = arith.addi %s, %one : tensor<i64>
    "latch.write"(%u#0) {state = @w} : (tensor<4x3xf32>) -> ()
    "latch.write"(%u#1) {state = @"w.momentum_buffer"} : (tensor<4x3xf32>) -> ()
    "latch.write"(%s1) {state = @step} : (tensor<i64>) -> ()
    "latch.return"(%loss, %x) : (tensor<f32>, tensor<2x4xf32>) -> ()
  }) {sym_name = "train"} : () -> ()
}
