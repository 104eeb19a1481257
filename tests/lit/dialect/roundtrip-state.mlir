// RUN: latch-opt %s --split-input-file | latch-opt --split-input-file | FileCheck %s
// latch.state, latch.update, latch.read, latch.write and latch.return print and parse back
// unchanged (generic form).

// CHECK-LABEL: sym_name = "rt_w"
// CHECK-SAME: type = tensor<4x8xf32>
// CHECK: "latch.state"() {kind = "grad_acc", sym_name = "rt_acc", type = tensor<4x8xbf16>}
// CHECK: "latch.state"() {kind = "moment", sym_name = "rt_m", type = tensor<4x8xf64>}
// CHECK: "latch.state"() {kind = "counter", sym_name = "rt_step", type = tensor<i64>}
// CHECK: "latch.update"() ({
// CHECK-NEXT: ^bb0(%[[X:.+]]: tensor<2x4xf32>, %[[Y:.+]]: tensor<2xi64>):
// CHECK-NEXT: %[[W:.+]] = "latch.read"() {state = @rt_w} : () -> tensor<4x8xf32>
// CHECK-NEXT: %[[S:.+]] = "latch.read"() {state = @rt_step} : () -> tensor<i64>
// CHECK-NEXT: "latch.write"(%[[W]]) {state = @rt_w} : (tensor<4x8xf32>) -> ()
// CHECK-NEXT: "latch.write"(%[[S]]) {state = @rt_step} : (tensor<i64>) -> ()
// CHECK-NEXT: %[[L:.+]] = "latch.read"() {state = @rt_loss} : () -> tensor<f32>
// CHECK-NEXT: "latch.return"(%[[L]], %[[X]]) : (tensor<f32>, tensor<2x4xf32>) -> ()
// CHECK-NEXT: }) {sym_name = "rt_train"} : () -> ()
"latch.state"() {sym_name = "rt_w", type = tensor<4x8xf32>, kind = "param"} : () -> ()
"latch.state"() {sym_name = "rt_acc", type = tensor<4x8xbf16>, kind = "grad_acc"} : () -> ()
"latch.state"() {sym_name = "rt_m", type = tensor<4x8xf64>, kind = "moment"} : () -> ()
"latch.state"() {sym_name = "rt_step", type = tensor<i64>, kind = "counter"} : () -> ()
"latch.state"() {sym_name = "rt_loss", type = tensor<f32>, kind = "moment"} : () -> ()
"latch.update"() ({
^bb0(%x: tensor<2x4xf32>, %y: tensor<2xi64>):
  %w = "latch.read"() {state = @rt_w} : () -> tensor<4x8xf32>
  %s = "latch.read"() {state = @rt_step} : () -> tensor<i64>
  "latch.write"(%w) {state = @rt_w} : (tensor<4x8xf32>) -> ()
  "latch.write"(%s) {state = @rt_step} : (tensor<i64>) -> ()
  %l = "latch.read"() {state = @rt_loss} : () -> tensor<f32>
  "latch.return"(%l, %x) : (tensor<f32>, tensor<2x4xf32>) -> ()
}) {sym_name = "rt_train"} : () -> ()

// -----

// An update may have no inputs, read a state twice and return only a bf16 loss; attributes
// the spec does not list are kept.
// CHECK-LABEL: sym_name = "rt2_loss"
// CHECK: "latch.update"() ({
// CHECK-NEXT: %[[A:.+]] = "latch.read"() {state = @rt2_loss} : () -> tensor<bf16>
// CHECK-NEXT: %[[B:.+]] = "latch.read"() {state = @rt2_loss} : () -> tensor<bf16>
// CHECK-NEXT: "latch.return"(%[[B]]) : (tensor<bf16>) -> ()
// CHECK-NEXT: }) {note = "kept", sym_name = "rt2_train"} : () -> ()
"latch.state"() {sym_name = "rt2_loss", type = tensor<bf16>, kind = "moment"} : () -> ()
"latch.update"() ({
  %a = "latch.read"() {state = @rt2_loss} : () -> tensor<bf16>
  %b = "latch.read"() {state = @rt2_loss} : () -> tensor<bf16>
  "latch.return"(%b) : (tensor<bf16>) -> ()
}) {sym_name = "rt2_train", note = "kept"} : () -> ()

// -----

// latch.call calls a func.func of the module from inside the update.
// CHECK-LABEL: sym_name = "call_w"
// CHECK: "latch.update"() ({
// CHECK-NEXT: ^bb0(%[[X:.+]]: tensor<4xf32>):
// CHECK-NEXT: %[[W:.+]] = "latch.read"() {state = @call_w}
// CHECK-NEXT: %[[R:.+]]:2 = "latch.call"(%[[W]], %[[X]]) {callee = @loss_and_grads} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>)
// CHECK-NEXT: "latch.return"(%[[R]]#0)
"latch.state"() {sym_name = "call_w", type = tensor<4xf32>, kind = "param"} : () -> ()
"latch.update"() ({
^bb0(%x: tensor<4xf32>):
  %w = "latch.read"() {state = @call_w} : () -> tensor<4xf32>
  %r:2 = "latch.call"(%w, %x) {callee = @loss_and_grads} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>)
  "latch.return"(%r#0) : (tensor<f32>) -> ()
}) {sym_name = "call_train"} : () -> ()
func.func @loss_and_grads(%w: tensor<4xf32>, %x: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) {
  %l = arith.constant dense<0.0> : tensor<f32>
  return %l, %w : tensor<f32>, tensor<4xf32>
}
