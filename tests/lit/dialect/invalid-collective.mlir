// RUN: latch-opt %s --split-input-file --verify-diagnostics
// Verifier rules of latch.all_reduce (tensor and buffer forms).

"latch.update"() ({
^bb0(%g: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.all_reduce' op reduction must be one of mean, sum; got 'max'}}
  %r = "latch.all_reduce"(%g) {bucket = 0 : i64, reduction = "max"} : (tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%g: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.all_reduce' op bucket must be >= 0}}
  %r = "latch.all_reduce"(%g) {bucket = -1 : i64, reduction = "mean"} : (tensor<4xf32>) -> tensor<4xf32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%g: tensor<4xf32>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.all_reduce' op tensor form: the result types must equal the operand types (tensor<4xf32>), got (tensor<4xbf16>)}}
  %r = "latch.all_reduce"(%g) {bucket = 0 : i64, reduction = "mean"} : (tensor<4xf32>) -> tensor<4xbf16>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

"latch.update"() ({
^bb0(%g: tensor<4xf32>, %h: tensor<2xbf16>, %l: tensor<f32>):
  // expected-error @+1 {{'latch.all_reduce' op the operands of one bucket share one floating-point element type; got bf16, f32}}
  %r:2 = "latch.all_reduce"(%g, %h) {bucket = 0 : i64, reduction = "mean"} : (tensor<4xf32>, tensor<2xbf16>) -> (tensor<4xf32>, tensor<2xbf16>)
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

func.func @f(%b: memref<4x2xf32>) {
  // expected-error @+1 {{'latch.all_reduce' op buffer form: one 1-D floating-point memref (the bucket), no results; got memref<4x2xf32> -> 0 results}}
  "latch.all_reduce"(%b) {bucket = 0 : i64, reduction = "mean"} : (memref<4x2xf32>) -> ()
  return
}
