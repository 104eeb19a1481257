// RUN: latch-opt %s --split-input-file --verify-diagnostics
// The generic rules of latch-verify (what IRDL would check): op names, parents, operand and
// result counts and types, attributes, regions, terminators and dominance.

// expected-error @+1 {{'latch.frobnicate' op is not an op of the latch dialect}}
"latch.frobnicate"() : () -> ()

// -----

// expected-error @+1 {{'foo.bar' op is not a registered operation}}
"foo.bar"() : () -> ()

// -----

// expected-error @+1 {{'func.func' op block argument type '!foo.bar' belongs to a dialect that is not loaded}}
func.func @f(%x: !foo.bar) {
  return
}

// -----

// expected-error @+1 {{'func.func' op attribute 'x' uses '#foo.baz<1>', of a dialect that is not loaded}}
func.func private @g() attributes {x = #foo.baz<1>}

// -----

// expected-error @+1 {{'func.func' op block argument type '!foo.elt' belongs to a dialect that is not loaded}}
func.func @h(%x: tensor<2x!foo.elt>) {
  return
}

// -----

"latch.update"() ({
^bb0(%l: tensor<f32>):
  // expected-error @+1 {{'latch.state' op expects parent op builtin.module, got latch.update}}
  "latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "param"} : () -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

func.func @f(%l: tensor<f32>) {
  // expected-error @+1 {{'latch.return' op expects parent op latch.update, got func.func}}
  "latch.return"(%l) : (tensor<f32>) -> ()
  return
}

// -----

"latch.update"() ({
^bb0(%x: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.yield' op expects parent op one of latch.every, latch.loop, latch.scan, got latch.update}}
  "latch.yield"(%x) : (tensor<4xf32>) -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%a: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.accumulate' op expects exactly 2 operands, got 1}}
  %n = "latch.accumulate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.sgd' op expects 3 or 4 operands, got 5}}
  %n = "latch.sgd"(%p, %p, %l, %p, %p) {momentum = 0.9 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %l: tensor<f64>):
  // expected-error @+1 {{'latch.sgd' op operand 'lr' must be tensor<f32>, got tensor<f64>}}
  %n = "latch.sgd"(%p, %p, %l) {momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4xf32>, tensor<4xf32>, tensor<f64>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f64>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%g: tensor<4xi32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.clip_global_norm' op operand 'grads' #1 must be ranked tensor of floats, got tensor<4xi32>}}
  %c:3 = "latch.clip_global_norm"(%l, %g) {max_norm = 1.0 : f64} : (tensor<f32>, tensor<4xi32>) -> (tensor<f32>, tensor<4xi32>, tensor<f32>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%s: tensor<i64>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.warmup_cosine' op expects exactly 1 results, got 2}}
  %lr:2 = "latch.warmup_cosine"(%s) {peak = 1.0 : f64, warmup_steps = 1 : i64, total_steps = 2 : i64, final_ratio = 0.0 : f64} : (tensor<i64>) -> (tensor<f32>, tensor<f32>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%s: tensor<i64>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.warmup_cosine' op result 'lr' must be tensor<f32>, got tensor<bf16>}}
  %lr = "latch.warmup_cosine"(%s) {peak = 1.0 : f64, warmup_steps = 1 : i64, total_steps = 2 : i64, final_ratio = 0.0 : f64} : (tensor<i64>) -> tensor<bf16>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

// expected-error @+1 {{'latch.state' op requires attribute 'kind'}}
"latch.state"() {sym_name = "w", type = tensor<4xf32>} : () -> ()

// -----

"latch.update"() ({
^bb0(%s: tensor<i64>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.every' op attribute 'period' must be an i64 IntegerAttr, got 4 : i32}}
  "latch.every"(%s) ({
    "latch.yield"() : () -> ()
  }) {period = 4 : i32} : (tensor<i64>) -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%s: tensor<i64>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.warmup_cosine' op attribute 'peak' must be an f64 FloatAttr, got 1.000000e+00 : f32}}
  %lr = "latch.warmup_cosine"(%s) {peak = 1.0 : f32, warmup_steps = 1 : i64, total_steps = 2 : i64, final_ratio = 0.0 : f64} : (tensor<i64>) -> tensor<f32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.state"() {sym_name = "w", type = tensor<4xf32>, kind = "param"} : () -> ()
"latch.update"() ({
^bb0(%l: tensor<f32>):
  // expected-error @+1 {{'latch.read' op attribute 'state' must be an FlatSymbolRefAttr, got @w::@x}}
  %w = "latch.read"() {state = @w::@x} : () -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

// expected-error @+1 {{'latch.update' op expects 1 region(s), got 0}}
"latch.update"() {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%a: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.accumulate' op expects 0 region(s), got 1}}
  %n = "latch.accumulate"(%a, %a) ({
    "latch.yield"() : () -> ()
  }) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

// expected-error @+1 {{'latch.update' op region 'body' must have exactly one block, got 2}}
"latch.update"() ({
^bb0(%l: tensor<f32>):
  "latch.return"(%l) : (tensor<f32>) -> ()
^bb1(%m: tensor<f32>):
  "latch.return"(%m) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%s: tensor<i64>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.every' op region 'body' must have no block arguments, got 1}}
  "latch.every"(%s) ({
  ^bb0(%x: tensor<i64>):
    "latch.yield"() : () -> ()
  }) {period = 2 : i64} : (tensor<i64>) -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

// expected-error @+1 {{'latch.update' op region 'body' must end with latch.return, got latch.yield}}
"latch.update"() ({
^bb0(%l: tensor<f32>):
  "latch.yield"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%s: tensor<i64>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.loop' op region 'body' must end with latch.yield, got an empty block}}
  "latch.loop"() ({
  ^bb0(%i: tensor<i64>):
  }) {times = 2 : i64} : () -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%a: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.accumulate' op operand #1 does not dominate this use}}
  %n = "latch.accumulate"(%a, %m) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %m = "latch.accumulate"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
