// RUN: latch-opt %s --split-input-file --verify-diagnostics
// Verifier rules of latch.attention and latch.attention_grad (tensor and buffer forms).

func.func @f(%q: tensor<1x2x64x16xbf16>) {
  // expected-error @+1 {{'latch.attention' op scale must be finite and > 0; got 0.0}}
  %o, %l = "latch.attention"(%q, %q, %q) {causal = true, scale = 0.0 : f64} : (tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>) -> (tensor<1x2x64x16xbf16>, tensor<1x2x64xf32>)
  return
}

// -----

func.func @f(%q: tensor<1x2x64x16xbf16>) {
  // expected-error @+1 {{'latch.attention' op tensor form: 3 tensors in, 2 out; buffer form: 5 memrefs, no results; got 2 operands and 2 results}}
  %o, %l = "latch.attention"(%q, %q) {causal = true, scale = 0.25 : f64} : (tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>) -> (tensor<1x2x64x16xbf16>, tensor<1x2x64xf32>)
  return
}

// -----

func.func @f(%q: tensor<1x2x64x16xbf16>, %k: tensor<1x3x64x16xbf16>) {
  // expected-error @+1 {{'latch.attention' op q, k, v are [..., L, E], [..., S, E], [..., S, E] with one batch shape}}
  %o, %l = "latch.attention"(%q, %k, %k) {causal = false, scale = 0.25 : f64} : (tensor<1x2x64x16xbf16>, tensor<1x3x64x16xbf16>, tensor<1x3x64x16xbf16>) -> (tensor<1x2x64x16xbf16>, tensor<1x2x64xf32>)
  return
}

// -----

func.func @f(%q: tensor<1x2x64x16xf32>) {
  // expected-error @+1 {{'latch.attention' op q, k, v are bf16; got f32, f32, f32}}
  %o, %l = "latch.attention"(%q, %q, %q) {causal = true, scale = 0.25 : f64} : (tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>) -> (tensor<1x2x64x16xf32>, tensor<1x2x64xf32>)
  return
}

// -----

func.func @f(%q: tensor<1x2x64x16xbf16>, %k: tensor<1x2x128x16xbf16>) {
  // expected-error @+1 {{'latch.attention' op causal attention needs L == S; got 64 and 128}}
  %o, %l = "latch.attention"(%q, %k, %k) {causal = true, scale = 0.25 : f64} : (tensor<1x2x64x16xbf16>, tensor<1x2x128x16xbf16>, tensor<1x2x128x16xbf16>) -> (tensor<1x2x64x16xbf16>, tensor<1x2x64xf32>)
  return
}

// -----

func.func @f(%q: memref<1x2x64x16xbf16>, %l: memref<1x2x64xf32>, %d: memref<1x2x64xf32>) {
  // expected-error @+1 {{'latch.attention_grad' op scale must be finite and > 0; got -1.0}}
  "latch.attention_grad"(%q, %q, %q, %l, %q, %d, %q, %q, %q) {causal = true, scale = -1.0 : f64} : (memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x64xf32>, memref<1x2x64x16xbf16>, memref<1x2x64xf32>, memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>) -> ()
  return
}

// -----

func.func @f(%q: memref<1x2x64x16xbf16>, %l: memref<1x2x32xf32>, %d: memref<1x2x64xf32>) {
  // expected-error @+1 {{'latch.attention_grad' op lse must be 1x2x64xf32}}
  "latch.attention_grad"(%q, %q, %q, %l, %q, %d, %q, %q, %q) {causal = true, scale = 0.25 : f64} : (memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x32xf32>, memref<1x2x64x16xbf16>, memref<1x2x64xf32>, memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>, memref<1x2x64x16xbf16>) -> ()
  return
}

// -----

func.func @f(%q: tensor<1x2x64x16xbf16>, %k: tensor<1x2x128x16xbf16>, %l: tensor<1x2x64xf32>) {
  // expected-error @+1 {{'latch.attention_grad' op causal attention needs L == S; got 64 and 128}}
  %a, %b, %c = "latch.attention_grad"(%q, %k, %k, %l, %q, %l) {causal = true, scale = 0.25 : f64} : (tensor<1x2x64x16xbf16>, tensor<1x2x128x16xbf16>, tensor<1x2x128x16xbf16>, tensor<1x2x64xf32>, tensor<1x2x64x16xbf16>, tensor<1x2x64xf32>) -> (tensor<1x2x64x16xbf16>, tensor<1x2x128x16xbf16>, tensor<1x2x128x16xbf16>)
  return
}

// -----

func.func @f(%q: tensor<1x2x64x16xf32>, %l: tensor<1x2x64xf32>) {
  // expected-error @+1 {{'latch.attention_grad' op q, k, v are bf16; got f32, f32, f32}}
  %a, %b, %c = "latch.attention_grad"(%q, %q, %q, %l, %q, %l) {causal = true, scale = 0.25 : f64} : (tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64xf32>) -> (tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>)
  return
}

// -----

func.func @f(%q: tensor<1x2x64x16xbf16>, %l: tensor<1x2x64xf32>) {
  // expected-error @+1 {{'latch.attention_grad' op tensor form: 6 tensors in, 3 out; buffer form: 9 memrefs, no results; got 6 operands and 2 results}}
  %a, %b = "latch.attention_grad"(%q, %q, %q, %l, %q, %l) {causal = true, scale = 0.25 : f64} : (tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1x2x64xf32>, tensor<1x2x64x16xbf16>, tensor<1x2x64xf32>) -> (tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>)
  return
}
