// RUN: latch-opt %s --split-input-file --verify-diagnostics
// Verifier rules of latch.sgd, latch.adamw, latch.clip_global_norm, latch.warmup_cosine and
// latch.accumulate.

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>):
  // expected-error @+1 {{'latch.sgd' op momentum must be finite, got nan}}
  %n, %b = "latch.sgd"(%p, %p, %lr, %p) {momentum = 0x7FF8000000000000 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>):
  // expected-error @+1 {{'latch.sgd' op momentum must be >= 0, got -0.5}}
  %n, %b = "latch.sgd"(%p, %p, %lr, %p) {momentum = -0.5 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>):
  // expected-error @+1 {{'latch.sgd' op weight_decay must be >= 0, got -0.01}}
  %n = "latch.sgd"(%p, %p, %lr) {momentum = 0.0 : f64, weight_decay = -0.01 : f64, nesterov = false} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>):
  // expected-error @+1 {{'latch.sgd' op has no momentum buffer but momentum is 0.9 (buf is required iff momentum != 0)}}
  %n = "latch.sgd"(%p, %p, %lr) {momentum = 0.9 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>):
  // expected-error @+1 {{'latch.sgd' op has a momentum buffer but momentum is 0 (buf is required iff momentum != 0)}}
  %n, %b = "latch.sgd"(%p, %p, %lr, %p) {momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>):
  // expected-error @+1 {{'latch.sgd' op has new_buf iff it has buf: expected 2 results, got 1}}
  %n = "latch.sgd"(%p, %p, %lr, %p) {momentum = 0.9 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>):
  // expected-error @+1 {{'latch.sgd' op nesterov requires momentum > 0}}
  %n = "latch.sgd"(%p, %p, %lr) {momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = true} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %g: tensor<4xbf16>, %lr: tensor<f32>):
  // expected-error @+1 {{'latch.sgd' op grad type tensor<4xbf16> differs from param type tensor<4xf32>}}
  %n = "latch.sgd"(%p, %g, %lr) {momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4xf32>, tensor<4xbf16>, tensor<f32>) -> tensor<4xf32>
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %b: tensor<2xf32>, %lr: tensor<f32>):
  // expected-error @+1 {{'latch.sgd' op buf type tensor<2xf32> differs from param type tensor<4xf32>}}
  %n, %nb = "latch.sgd"(%p, %p, %lr, %b) {momentum = 0.9 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<2xf32>) -> (tensor<4xf32>, tensor<2xf32>)
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<i64>):
  // expected-error @+1 {{'latch.adamw' op eps must be finite, got inf}}
  %r:3 = "latch.adamw"(%p, %p, %p, %p, %lr, %t) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 0x7FF0000000000000 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<i64>):
  // expected-error @+1 {{'latch.adamw' op beta2 must be in [0, 1), got 1}}
  %r:3 = "latch.adamw"(%p, %p, %p, %p, %lr, %t) {beta1 = 0.9 : f64, beta2 = 1.0 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<i64>):
  // expected-error @+1 {{'latch.adamw' op beta1 must be in [0, 1), got -0.1}}
  %r:3 = "latch.adamw"(%p, %p, %p, %p, %lr, %t) {beta1 = -0.1 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<i64>):
  // expected-error @+1 {{'latch.adamw' op eps must be > 0, got 0}}
  %r:3 = "latch.adamw"(%p, %p, %p, %p, %lr, %t) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 0.0 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<i64>):
  // expected-error @+1 {{'latch.adamw' op weight_decay must be >= 0, got -1}}
  %r:3 = "latch.adamw"(%p, %p, %p, %p, %lr, %t) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = -1.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %v: tensor<4xf64>, %lr: tensor<f32>, %t: tensor<i64>):
  // expected-error @+1 {{'latch.adamw' op v type tensor<4xf64> differs from param type tensor<4xf32>}}
  %r:3 = "latch.adamw"(%p, %p, %p, %v, %lr, %t) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf64>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%p: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<i32>):
  // expected-error @+1 {{'latch.adamw' op operand 'step' must be tensor<i64>, got tensor<i32>}}
  %r:3 = "latch.adamw"(%p, %p, %p, %p, %lr, %t) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%g: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.clip_global_norm' op max_norm must be finite, got inf}}
  %c:2 = "latch.clip_global_norm"(%g) {max_norm = 0x7FF0000000000000 : f64} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%g: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.clip_global_norm' op max_norm must be > 0, got 0}}
  %c:2 = "latch.clip_global_norm"(%g) {max_norm = 0.0 : f64} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%g: tensor<4xf32>, %h: tensor<3xbf16>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.clip_global_norm' op results must be the operands' types followed by tensor<f32>; got (tensor<3xbf16>, tensor<4xf32>) for operands (tensor<4xf32>, tensor<3xbf16>)}}
  %c:3 = "latch.clip_global_norm"(%g, %h) {max_norm = 1.0 : f64} : (tensor<4xf32>, tensor<3xbf16>) -> (tensor<3xbf16>, tensor<4xf32>, tensor<f32>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%g: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.clip_global_norm' op results must be the operands' types followed by tensor<f32>; got (tensor<4xf32>, tensor<4xf32>) for operands (tensor<4xf32>)}}
  %c:3 = "latch.clip_global_norm"(%g) {max_norm = 1.0 : f64} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<f32>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%s: tensor<i64>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.warmup_cosine' op final_ratio must be finite, got nan}}
  %lr = "latch.warmup_cosine"(%s) {peak = 1.0 : f64, warmup_steps = 1 : i64, total_steps = 2 : i64, final_ratio = 0x7FF8000000000000 : f64} : (tensor<i64>) -> tensor<f32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%s: tensor<i64>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.warmup_cosine' op peak must be > 0, got -0.001}}
  %lr = "latch.warmup_cosine"(%s) {peak = -1.0e-3 : f64, warmup_steps = 1 : i64, total_steps = 2 : i64, final_ratio = 0.0 : f64} : (tensor<i64>) -> tensor<f32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%s: tensor<i64>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.warmup_cosine' op warmup_steps must be >= 0, got -1}}
  %lr = "latch.warmup_cosine"(%s) {peak = 1.0 : f64, warmup_steps = -1 : i64, total_steps = 2 : i64, final_ratio = 0.0 : f64} : (tensor<i64>) -> tensor<f32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%s: tensor<i64>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.warmup_cosine' op total_steps (10) must be > warmup_steps (10)}}
  %lr = "latch.warmup_cosine"(%s) {peak = 1.0 : f64, warmup_steps = 10 : i64, total_steps = 10 : i64, final_ratio = 0.0 : f64} : (tensor<i64>) -> tensor<f32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%s: tensor<i64>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.warmup_cosine' op final_ratio must be in [0, 1], got 1.5}}
  %lr = "latch.warmup_cosine"(%s) {peak = 1.0 : f64, warmup_steps = 0 : i64, total_steps = 10 : i64, final_ratio = 1.5 : f64} : (tensor<i64>) -> tensor<f32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%a: tensor<4xf32>, %g: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.accumulate' op new_acc type tensor<4xbf16> differs from acc type tensor<4xf32>}}
  %n = "latch.accumulate"(%a, %g) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xbf16>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
