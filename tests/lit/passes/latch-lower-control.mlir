// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-lower-control)' | FileCheck %s
// latch.every -> scf.if on (counter % period == 0); latch.loop -> scf.for with iter_args;
// latch.scan -> scf.for slicing xs and inserting ys.

// CHECK-LABEL: func.func @every(
// CHECK-SAME: %[[C:[^:]*]]: tensor<i64>, %[[P:[^:]*]]: tensor<4xf32>, %[[G:[^:]*]]: tensor<4xf32>)
// CHECK: %[[N:.*]] = tensor.extract %[[C]][] : tensor<i64>
// CHECK: %[[R:.*]] = arith.remsi %[[N]], %{{.*}} : i64
// CHECK: %[[EQ:.*]] = arith.cmpi eq, %[[R]], %{{.*}} : i64
// CHECK: %[[IF:.*]] = scf.if %[[EQ]] -> (tensor<4xf32>) {
// CHECK:   %[[NP:.*]] = arith.subf %[[P]], %[[G]] : tensor<4xf32>
// CHECK:   scf.yield %[[NP]] : tensor<4xf32>
// CHECK: } else {
// CHECK:   scf.yield %[[P]] : tensor<4xf32>
// CHECK: }
// CHECK: return %[[IF]]
func.func @every(%count: tensor<i64>, %p: tensor<4xf32>, %g: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "latch.every"(%count, %p) ({
    %1 = arith.subf %p, %g : tensor<4xf32>
    "latch.yield"(%1) : (tensor<4xf32>) -> ()
  }) {period = 4 : i64} : (tensor<i64>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @loop(
// CHECK-SAME: %[[X:[^:]*]]: tensor<8xf32>, %[[W:[^:]*]]: tensor<8xf32>)
// CHECK-DAG: %[[LB:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[UB:.*]] = arith.constant 3 : index
// CHECK-DAG: %[[ST:.*]] = arith.constant 1 : index
// CHECK: %[[FOR:.*]] = scf.for %[[IV:.*]] = %[[LB]] to %[[UB]] step %[[ST]] iter_args(%[[H:.*]] = %[[X]]) -> (tensor<8xf32>) {
// CHECK:   %[[I:.*]] = arith.index_cast %[[IV]] : index to i64
// CHECK:   %[[IT:.*]] = tensor.from_elements %[[I]] : tensor<i64>
// CHECK:   %[[T:.*]] = "latch.warmup_cosine"(%[[IT]])
// CHECK:   %[[B:.*]] = arith.addf %[[H]], %[[W]] : tensor<8xf32>
// CHECK:   scf.yield %[[B]] : tensor<8xf32>
// CHECK: return %[[FOR]]
func.func @loop(%x: tensor<8xf32>, %w: tensor<8xf32>) -> tensor<8xf32> {
  %0 = "latch.loop"(%x) ({
  ^bb0(%i: tensor<i64>, %h: tensor<8xf32>):
    %t = "latch.warmup_cosine"(%i) {peak = 1.0 : f64, warmup_steps = 1 : i64, total_steps = 3 : i64, final_ratio = 0.0 : f64} : (tensor<i64>) -> tensor<f32>
    %1 = arith.addf %h, %w : tensor<8xf32>
    "latch.yield"(%1) : (tensor<8xf32>) -> ()
  }) {times = 3 : i64} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// CHECK-LABEL: func.func @scan(
// CHECK-SAME: %[[C0:[^:]*]]: tensor<4xf32>, %[[XS:[^:]*]]: tensor<5x4xf32>)
// CHECK: %[[E:.*]] = tensor.empty() : tensor<5x2xf32>
// CHECK: %[[FOR:.*]]:2 = scf.for %[[IV:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[C:.*]] = %[[C0]], %[[YS:.*]] = %[[E]]) -> (tensor<4xf32>, tensor<5x2xf32>) {
// CHECK:   %[[X:.*]] = tensor.extract_slice %[[XS]][%[[IV]], 0] [1, 4] [1, 1] : tensor<5x4xf32> to tensor<4xf32>
// CHECK:   %[[B:.*]] = arith.addf %[[C]], %[[X]] : tensor<4xf32>
// CHECK:   %[[Y:.*]] = tensor.extract_slice %[[B]][0] [2] [1] : tensor<4xf32> to tensor<2xf32>
// CHECK:   %[[INS:.*]] = tensor.insert_slice %[[Y]] into %[[YS]][%[[IV]], 0] [1, 2] [1, 1] : tensor<2xf32> into tensor<5x2xf32>
// CHECK:   scf.yield %[[B]], %[[INS]] : tensor<4xf32>, tensor<5x2xf32>
// CHECK: return %[[FOR]]#0, %[[FOR]]#1
func.func @scan(%c: tensor<4xf32>, %xs: tensor<5x4xf32>) -> (tensor<4xf32>, tensor<5x2xf32>) {
  %0:2 = "latch.scan"(%c, %xs) ({
  ^bb0(%carry: tensor<4xf32>, %x: tensor<4xf32>):
    %1 = arith.addf %carry, %x : tensor<4xf32>
    %y = tensor.extract_slice %1[0] [2] [1] : tensor<4xf32> to tensor<2xf32>
    "latch.yield"(%1, %y) : (tensor<4xf32>, tensor<2xf32>) -> ()
  }) {num_carries = 1 : i64, length = 5 : i64} : (tensor<4xf32>, tensor<5x4xf32>) -> (tensor<4xf32>, tensor<5x2xf32>)
  return %0#0, %0#1 : tensor<4xf32>, tensor<5x2xf32>
}

// Nested: an every inside a loop body is lowered too.
// CHECK-LABEL: func.func @nested(
// CHECK: scf.for
// CHECK:   scf.if
// CHECK-NOT: latch.
// CHECK: return
func.func @nested(%x: tensor<8xf32>, %n: tensor<i64>) -> tensor<8xf32> {
  %0 = "latch.loop"(%x) ({
  ^bb0(%i: tensor<i64>, %h: tensor<8xf32>):
    %1 = "latch.every"(%i, %h) ({
      %2 = arith.addf %h, %h : tensor<8xf32>
      "latch.yield"(%2) : (tensor<8xf32>) -> ()
    }) {period = 2 : i64} : (tensor<i64>, tensor<8xf32>) -> tensor<8xf32>
    "latch.yield"(%1) : (tensor<8xf32>) -> ()
  }) {times = 4 : i64} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
