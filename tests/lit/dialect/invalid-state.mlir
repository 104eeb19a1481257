// RUN: latch-opt %s --split-input-file --verify-diagnostics
// Verifier rules of latch.state, latch.update, latch.read, latch.write and latch.return.

// expected-error @+1 {{'latch.state' op kind must be one of param, grad_acc, moment, counter; got 'weight'}}
"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "weight"} : () -> ()

// -----

// expected-error @+1 {{'latch.state' op type must be a ranked tensor type, got tensor<*xf32>}}
"latch.state"() {sym_name = "w", type = tensor<*xf32>, kind = "param"} : () -> ()

// -----

// expected-error @+1 {{'latch.state' op type must be a ranked tensor type, got f32}}
"latch.state"() {sym_name = "w", type = f32, kind = "param"} : () -> ()

// -----

// expected-error @+1 {{'latch.state' op a counter must be tensor<i64>, got tensor<i32>}}
"latch.state"() {sym_name = "step", type = tensor<i32>, kind = "counter"} : () -> ()

// -----

"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "param"} : () -> ()
// Unique symbols are checked by MLIR's verifier of builtin.module.
// expected-error @+1 {{redefinition of symbol named 'w'}}
"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "moment"} : () -> ()

// -----

"latch.state"() {sym_name = "train", type = tensor<4xf32>, kind = "param"} : () -> ()
// expected-error @+1 {{redefinition of symbol named 'train'}}
"latch.update"() ({
^bb0(%l: tensor<f32>):
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "train"} : () -> ()

// -----

// expected-error @+1 {{'latch.update' op block argument #1 must be a ranked tensor, got f32}}
"latch.update"() ({
^bb0(%l: tensor<f32>, %x: f32):
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "param"} : () -> ()
func.func @f() {
  // expected-error @+1 {{'latch.read' op must be inside a latch.update}}
  %w = "latch.read"() {state = @w} : () -> tensor<4xf32>
  return
}

// -----

"latch.update"() ({
^bb0(%l: tensor<f32>):
  // expected-error @+1 {{'latch.read' op '@w' does not name a latch.state}}
  %w = "latch.read"() {state = @w} : () -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "param"} : () -> ()
"latch.update"() ({
^bb0(%l: tensor<f32>):
  // expected-error @+1 {{'latch.read' op result type tensor<4xbf16> differs from the state's type tensor<4xf32>}}
  %w = "latch.read"() {state = @w} : () -> tensor<4xbf16>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "param"} : () -> ()
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'latch.write' op must be inside a latch.update}}
  "latch.write"(%x) {state = @w} : (tensor<4xf32>) -> ()
  return
}

// -----

// A symbol of the module that is not a latch.state does not count.
"latch.update"() ({
^bb0(%x: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.write' op '@u' does not name a latch.state}}
  "latch.write"(%x) {state = @u} : (tensor<4xf32>) -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "param"} : () -> ()
"latch.update"() ({
^bb0(%x: tensor<4x1xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.write' op operand type tensor<4x1xf32> differs from the state's type tensor<4xf32>}}
  "latch.write"(%x) {state = @w} : (tensor<4x1xf32>) -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

// A second write inside a nested region counts too.
"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "param"} : () -> ()
"latch.update"() ({
^bb0(%x: tensor<4xf32>, %s: tensor<i64>, %l: tensor<f32>):
  "latch.write"(%x) {state = @w} : (tensor<4xf32>) -> ()
  "latch.every"(%s) ({
    // expected-error @+1 {{'latch.write' op second write of state '@w' in this update}}
    "latch.write"(%x) {state = @w} : (tensor<4xf32>) -> ()
    "latch.yield"() : () -> ()
  }) {period = 2 : i64} : (tensor<i64>) -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

// One write per state per update: two updates may each write it.
"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "param"} : () -> ()
"latch.update"() ({
^bb0(%x: tensor<4xf32>, %l: tensor<f32>):
  "latch.write"(%x) {state = @w} : (tensor<4xf32>) -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u1"} : () -> ()
"latch.update"() ({
^bb0(%x: tensor<4xf32>, %l: tensor<f32>):
  "latch.write"(%x) {state = @w} : (tensor<4xf32>) -> ()
  // expected-error @+1 {{'latch.return' op first operand must be the loss, a rank-0 float tensor; got tensor<4xf32>}}
  "latch.return"(%x) : (tensor<4xf32>) -> ()
}) {sym_name = "u2"} : () -> ()

// -----

"latch.update"() ({
  // expected-error @+1 {{'latch.return' op first operand must be the loss, a rank-0 float tensor; got no operands}}
  "latch.return"() : () -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%l: tensor<i64>):
  // expected-error @+1 {{'latch.return' op first operand must be the loss, a rank-0 float tensor; got tensor<i64>}}
  "latch.return"(%l) : (tensor<i64>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%x: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.call' op '@u' does not name a func.func of the module}}
  %r = "latch.call"(%x) {callee = @u} : (tensor<4xf32>) -> tensor<f32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%x: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.call' op result types (tensor<f32>, tensor<4xf32>) differ from those of @f: (tensor<f32>)}}
  %r:2 = "latch.call"(%x) {callee = @f} : (tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
func.func private @f(tensor<4xf32>) -> tensor<f32>

// -----

// States are checked before the ops that use them, wherever they are declared.
"latch.update"() ({
^bb0(%l: tensor<f32>):
  %w = "latch.read"() {state = @w} : () -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
// expected-error @+1 {{'latch.state' op requires attribute 'type'}}
"latch.state"() {sym_name = "w", kind = "param"} : () -> ()
