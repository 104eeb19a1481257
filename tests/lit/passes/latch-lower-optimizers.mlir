// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-lower-optimizers)' | FileCheck %s
// Each learning-rule op becomes linalg.generic on tensors with torch.optim's formulas; the
// per-step scalars are computed once from the rank-0 operands and broadcast as rank-0 inputs.

// CHECK-LABEL: func.func @sgd_plain(
// CHECK-NOT: latch.
// CHECK: tensor.empty() : tensor<4x3xf32>
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]{{.*}} ins(%arg0, %arg1, %arg2 : tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>)
// CHECK-NEXT: ^bb0(%[[P:.*]]: f32, %[[G:.*]]: f32, %[[LR:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT: %[[D:.*]] = arith.mulf %[[LR]], %[[G]] : f32
// CHECK-NEXT: %[[N:.*]] = arith.subf %[[P]], %[[D]] : f32
// CHECK-NEXT: linalg.yield %[[N]] : f32
func.func @sgd_plain(%p: tensor<4x3xf32>, %g: tensor<4x3xf32>, %lr: tensor<f32>) -> tensor<4x3xf32> {
  %0 = "latch.sgd"(%p, %g, %lr) {momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// g' = g + wd*p; buf' = m*buf + g'; d = g' + m*buf' (nesterov); p' = p - lr*d
// CHECK-LABEL: func.func @sgd_nesterov(
// CHECK: %{{.*}}:2 = linalg.generic
// CHECK-NEXT: ^bb0(%[[P:.*]]: f32, %[[G:.*]]: f32, %[[LR:.*]]: f32, %[[B:.*]]: f32, %{{.*}}: f32, %{{.*}}: f32):
// CHECK-NEXT: %[[WD:.*]] = arith.constant 0.00999999977 : f32
// CHECK-NEXT: %[[PW:.*]] = arith.mulf %[[P]], %[[WD]] : f32
// CHECK-NEXT: %[[GP:.*]] = arith.addf %[[G]], %[[PW]] : f32
// CHECK-NEXT: %[[M:.*]] = arith.constant 0.899999976 : f32
// CHECK-NEXT: %[[BM:.*]] = arith.mulf %[[B]], %[[M]] : f32
// CHECK-NEXT: %[[B1:.*]] = arith.addf %[[BM]], %[[GP]] : f32
// CHECK: %[[MB:.*]] = arith.mulf %[[B1]], %{{.*}} : f32
// CHECK-NEXT: %[[D:.*]] = arith.addf %[[GP]], %[[MB]] : f32
// CHECK-NEXT: %[[U:.*]] = arith.mulf %[[LR]], %[[D]] : f32
// CHECK-NEXT: %[[NP:.*]] = arith.subf %[[P]], %[[U]] : f32
// CHECK-NEXT: linalg.yield %[[NP]], %[[B1]] : f32, f32
func.func @sgd_nesterov(%p: tensor<8xf32>, %g: tensor<8xf32>, %lr: tensor<f32>, %b: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %0:2 = "latch.sgd"(%p, %g, %lr, %b) {momentum = 0.9 : f64, weight_decay = 0.01 : f64, nesterov = true} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>)
  return %0#0, %0#1 : tensor<8xf32>, tensor<8xf32>
}

// Bias corrections in f64 from the i64 step: 1 - beta^t; step_size = lr/bc1; decay = 1 - lr*wd.
// CHECK-LABEL: func.func @adamw(
// CHECK: arith.sitofp %{{.*}} : i64 to f64
// CHECK: math.powf
// CHECK: math.powf
// CHECK: math.sqrt %{{.*}} : f64
// CHECK: %{{.*}}:3 = linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}, #{{.*}}, #[[SCALAR:.*]], #[[SCALAR]], #[[SCALAR]], #{{.*}}, #{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel"]}
// CHECK: math.sqrt %{{.*}} : f32
// CHECK: arith.divf
// CHECK: linalg.yield %{{.*}}, %{{.*}}, %{{.*}} : f32, f32, f32
func.func @adamw(%p: tensor<4x3xf32>, %g: tensor<4x3xf32>, %m: tensor<4x3xf32>, %v: tensor<4x3xf32>, %lr: tensor<f32>, %t: tensor<i64>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>) {
  %0:3 = "latch.adamw"(%p, %g, %m, %v, %lr, %t) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, weight_decay = 0.01 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>, tensor<i64>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>)
  return %0#0, %0#1, %0#2 : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>
}

// bf16 params are computed in f32.
// CHECK-LABEL: func.func @adamw_bf16(
// CHECK: linalg.generic
// CHECK: arith.extf %{{.*}} : bf16 to f32
// CHECK: arith.truncf %{{.*}} : f32 to bf16
func.func @adamw_bf16(%p: tensor<16xbf16>, %g: tensor<16xbf16>, %m: tensor<16xbf16>, %v: tensor<16xbf16>, %lr: tensor<f32>, %t: tensor<i64>) -> tensor<16xbf16> {
  %0:3 = "latch.adamw"(%p, %g, %m, %v, %lr, %t) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64} : (tensor<16xbf16>, tensor<16xbf16>, tensor<16xbf16>, tensor<16xbf16>, tensor<f32>, tensor<i64>) -> (tensor<16xbf16>, tensor<16xbf16>, tensor<16xbf16>)
  return %0#0 : tensor<16xbf16>
}

// CHECK-LABEL: func.func @accumulate(
// CHECK: linalg.generic
// CHECK: arith.addf
func.func @accumulate(%a: tensor<5xf32>, %g: tensor<5xf32>) -> tensor<5xf32> {
  %0 = "latch.accumulate"(%a, %g) : (tensor<5xf32>, tensor<5xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}

// One sum-of-squares reduction per gradient, each into its own element of one tensor (no
// chain of scalar adds: the reductions are independent), one sum of those, then
// coef = min(1, max/(norm + 1e-6)).
// CHECK-LABEL: func.func @clip(
// CHECK: %[[PARTS:.*]] = linalg.fill {{.*}} -> tensor<2xf32>
// CHECK: %[[S0:.*]] = tensor.extract_slice %[[PARTS]][0] [1] [1] : tensor<2xf32> to tensor<f32>
// CHECK: %[[R0:.*]] = linalg.generic {{.*}}iterator_types = ["reduction", "reduction"]{{.*}} outs(%[[S0]] : tensor<f32>)
// CHECK: %[[P1:.*]] = tensor.insert_slice %[[R0]] into %[[PARTS]][0] [1] [1]
// CHECK: %[[S1:.*]] = tensor.extract_slice %[[P1]][1] [1] [1]
// CHECK: %[[R1:.*]] = linalg.generic {{.*}}iterator_types = ["reduction"]{{.*}} outs(%[[S1]] : tensor<f32>)
// CHECK: %[[P2:.*]] = tensor.insert_slice %[[R1]] into %[[P1]][1] [1] [1]
// CHECK: linalg.fill
// CHECK: linalg.generic {{.*}}iterator_types = ["reduction"]{{.*}} ins(%[[P2]] : tensor<2xf32>)
// CHECK: math.sqrt
// CHECK: arith.minimumf
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel"]
// CHECK: return
func.func @clip(%a: tensor<4x3xf32>, %b: tensor<7xf32>) -> (tensor<4x3xf32>, tensor<7xf32>, tensor<f32>) {
  %0:3 = "latch.clip_global_norm"(%a, %b) {max_norm = 1.0 : f64} : (tensor<4x3xf32>, tensor<7xf32>) -> (tensor<4x3xf32>, tensor<7xf32>, tensor<f32>)
  return %0#0, %0#1, %0#2 : tensor<4x3xf32>, tensor<7xf32>, tensor<f32>
}
