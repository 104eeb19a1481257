// RUN: latch-opt %s --split-input-file --verify-diagnostics
// Verifier rules of latch.every, latch.loop and latch.scan.

"latch.update"() ({
^bb0(%s: tensor<i64>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.every' op period must be >= 1, got 0}}
  "latch.every"(%s) ({
    "latch.yield"() : () -> ()
  }) {period = 0 : i64} : (tensor<i64>) -> ()
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%s: tensor<i64>, %w: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.every' op result types must be (tensor<4xf32>), got (tensor<4xbf16>)}}
  %r = "latch.every"(%s, %w) ({
    "latch.yield"(%w) : (tensor<4xf32>) -> ()
  }) {period = 2 : i64} : (tensor<i64>, tensor<4xf32>) -> tensor<4xbf16>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%s: tensor<i64>, %w: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.every' op yielded types must be (tensor<4xf32>), got (tensor<4xf32>, tensor<f32>)}}
  %r = "latch.every"(%s, %w) ({
    "latch.yield"(%w, %l) : (tensor<4xf32>, tensor<f32>) -> ()
  }) {period = 2 : i64} : (tensor<i64>, tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%s: tensor<f32>, %w: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.every' op operand 'counter' must be tensor<i64>, got tensor<f32>}}
  %r = "latch.every"(%s, %w) ({
    "latch.yield"(%w) : (tensor<4xf32>) -> ()
  }) {period = 2 : i64} : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%w: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.loop' op times must be >= 1, got 0}}
  %r = "latch.loop"(%w) ({
  ^bb0(%i: tensor<i64>, %c: tensor<4xf32>):
    "latch.yield"(%c) : (tensor<4xf32>) -> ()
  }) {times = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%w: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.loop' op result types must be (tensor<4xf32>), got (tensor<8xf32>)}}
  %r = "latch.loop"(%w) ({
  ^bb0(%i: tensor<i64>, %c: tensor<4xf32>):
    "latch.yield"(%c) : (tensor<4xf32>) -> ()
  }) {times = 2 : i64} : (tensor<4xf32>) -> tensor<8xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%w: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.loop' op block argument types must be (tensor<i64>, tensor<4xf32>), got (tensor<4xf32>)}}
  %r = "latch.loop"(%w) ({
  ^bb0(%c: tensor<4xf32>):
    "latch.yield"(%c) : (tensor<4xf32>) -> ()
  }) {times = 2 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%w: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.loop' op yielded types must be (tensor<4xf32>), got (tensor<i64>)}}
  %r = "latch.loop"(%w) ({
  ^bb0(%i: tensor<i64>, %c: tensor<4xf32>):
    "latch.yield"(%i) : (tensor<i64>) -> ()
  }) {times = 2 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%x: tensor<3x4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.scan' op num_carries must be >= 0, got -1}}
  %r = "latch.scan"(%x) ({
  ^bb0(%xi: tensor<4xf32>):
    "latch.yield"(%xi) : (tensor<4xf32>) -> ()
  }) {num_carries = -1 : i64, length = 3 : i64} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%x: tensor<3x4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.scan' op num_carries (2) exceeds the number of operands (1)}}
  %r = "latch.scan"(%x) ({
  ^bb0(%xi: tensor<4xf32>):
    "latch.yield"(%xi) : (tensor<4xf32>) -> ()
  }) {num_carries = 2 : i64, length = 3 : i64} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%c: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.scan' op length must be >= 1, got 0}}
  %r = "latch.scan"(%c) ({
  ^bb0(%ci: tensor<4xf32>):
    "latch.yield"(%ci) : (tensor<4xf32>) -> ()
  }) {num_carries = 1 : i64, length = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%x: tensor<3x4xf32>, %y: tensor<2x4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.scan' op x #1 must be a ranked tensor with leading dimension 3 (length), got tensor<2x4xf32>}}
  %r:2 = "latch.scan"(%x, %y) ({
  ^bb0(%xi: tensor<4xf32>, %yi: tensor<4xf32>):
    "latch.yield"(%xi, %yi) : (tensor<4xf32>, tensor<4xf32>) -> ()
  }) {num_carries = 0 : i64, length = 3 : i64} : (tensor<3x4xf32>, tensor<2x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%x: tensor<f32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.scan' op x #0 must be a ranked tensor with leading dimension 3 (length), got tensor<f32>}}
  %r = "latch.scan"(%x) ({
  ^bb0(%xi: tensor<f32>):
    "latch.yield"(%xi) : (tensor<f32>) -> ()
  }) {num_carries = 0 : i64, length = 3 : i64} : (tensor<f32>) -> tensor<3xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%c: tensor<f32>, %x: tensor<3x4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.scan' op block argument types must be (tensor<f32>, tensor<4xf32>), got (tensor<f32>, tensor<3x4xf32>)}}
  %r:2 = "latch.scan"(%c, %x) ({
  ^bb0(%ci: tensor<f32>, %xi: tensor<3x4xf32>):
    "latch.yield"(%ci, %ci) : (tensor<f32>, tensor<f32>) -> ()
  }) {num_carries = 1 : i64, length = 3 : i64} : (tensor<f32>, tensor<3x4xf32>) -> (tensor<f32>, tensor<3xf32>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%c: tensor<f32>, %x: tensor<3x4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.scan' op the first num_carries yielded types must be (tensor<f32>), got (tensor<4xf32>)}}
  %r:2 = "latch.scan"(%c, %x) ({
  ^bb0(%ci: tensor<f32>, %xi: tensor<4xf32>):
    "latch.yield"(%xi, %ci) : (tensor<4xf32>, tensor<f32>) -> ()
  }) {num_carries = 1 : i64, length = 3 : i64} : (tensor<f32>, tensor<3x4xf32>) -> (tensor<f32>, tensor<3xf32>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

// Control ops may also appear outside a latch.update, e.g. in a function.
func.func @f(%x: tensor<3x4xf32>, %y: f32) {
  // expected-error @+1 {{'latch.scan' op yielded y slices must be ranked tensors, got (f32)}}
  %r = "latch.scan"(%x) ({
  ^bb0(%xi: tensor<4xf32>):
    "latch.yield"(%y) : (f32) -> ()
  }) {num_carries = 0 : i64, length = 3 : i64} : (tensor<3x4xf32>) -> tensor<3xf32>
  return
}

// -----

"latch.update"() ({
^bb0(%c: tensor<f32>, %x: tensor<3x4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.scan' op result types must be (tensor<f32>, tensor<3x4xf32>), got (tensor<f32>, tensor<4xf32>)}}
  %r:2 = "latch.scan"(%c, %x) ({
  ^bb0(%ci: tensor<f32>, %xi: tensor<4xf32>):
    "latch.yield"(%ci, %xi) : (tensor<f32>, tensor<4xf32>) -> ()
  }) {num_carries = 1 : i64, length = 3 : i64} : (tensor<f32>, tensor<3x4xf32>) -> (tensor<f32>, tensor<4xf32>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
