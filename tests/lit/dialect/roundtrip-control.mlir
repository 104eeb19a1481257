// RUN: latch-opt %s --split-input-file | latch-opt --split-input-file | FileCheck %s
// latch.every, latch.loop, latch.scan and latch.yield print and parse back unchanged, with
// values of different types and values captured from above.

// CHECK-LABEL: sym_name = "every_w"
// CHECK: ^bb0(%[[N:.+]]: tensor<i64>, %[[G:.+]]: tensor<4xf32>, %[[LR:.+]]: tensor<f32>, %[[Z:.+]]: tensor<2xbf16>):
// CHECK: %[[W:.+]] = "latch.read"() {state = @every_w}
// CHECK-NEXT: %[[R:.+]]:2 = "latch.every"(%[[N]], %[[W]], %[[Z]]) ({
// CHECK-NEXT: %[[P:.+]] = "latch.sgd"(%[[W]], %[[G]], %[[LR]]) {{.*}} -> tensor<4xf32>
// CHECK-NEXT: "latch.yield"(%[[P]], %[[Z]]) : (tensor<4xf32>, tensor<2xbf16>) -> ()
// CHECK-NEXT: }) {period = 4 : i64} : (tensor<i64>, tensor<4xf32>, tensor<2xbf16>) -> (tensor<4xf32>, tensor<2xbf16>)
// CHECK-NEXT: "latch.write"(%[[R]]#0) {state = @every_w}
"latch.state"() {sym_name = "every_w", type = tensor<4xf32>, kind = "param"} : () -> ()
"latch.update"() ({
^bb0(%n: tensor<i64>, %g: tensor<4xf32>, %lr: tensor<f32>, %z: tensor<2xbf16>):
  %w = "latch.read"() {state = @every_w} : () -> tensor<4xf32>
  %r:2 = "latch.every"(%n, %w, %z) ({
    %p = "latch.sgd"(%w, %g, %lr) {momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    "latch.yield"(%p, %z) : (tensor<4xf32>, tensor<2xbf16>) -> ()
  }) {period = 4 : i64} : (tensor<i64>, tensor<4xf32>, tensor<2xbf16>) -> (tensor<4xf32>, tensor<2xbf16>)
  "latch.write"(%r#0) {state = @every_w} : (tensor<4xf32>) -> ()
  "latch.return"(%lr) : (tensor<f32>) -> ()
}) {sym_name = "every_train"} : () -> ()

// -----

// A loop body applied 3 times to two carried values; %w is captured (shared weights).
// CHECK-LABEL: sym_name = "loop_w"
// CHECK: %[[W:.+]] = "latch.read"() {state = @loop_w}
// CHECK-NEXT: %[[R:.+]]:2 = "latch.loop"(%[[H:.+]], %[[S:.+]]) ({
// CHECK-NEXT: ^bb0(%[[I:.+]]: tensor<i64>, %[[C:.+]]: tensor<8xf32>, %[[D:.+]]: tensor<f32>):
// CHECK-NEXT: %[[N:.+]] = "latch.accumulate"(%[[C]], %[[W]]) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT: "latch.yield"(%[[N]], %[[D]]) : (tensor<8xf32>, tensor<f32>) -> ()
// CHECK-NEXT: }) {times = 3 : i64} : (tensor<8xf32>, tensor<f32>) -> (tensor<8xf32>, tensor<f32>)
// CHECK-NEXT: "latch.return"(%[[R]]#1, %[[R]]#0)
"latch.state"() {sym_name = "loop_w", type = tensor<8xf32>, kind = "param"} : () -> ()
"latch.update"() ({
^bb0(%h: tensor<8xf32>, %s: tensor<f32>):
  %w = "latch.read"() {state = @loop_w} : () -> tensor<8xf32>
  %r:2 = "latch.loop"(%h, %s) ({
  ^bb0(%i: tensor<i64>, %c: tensor<8xf32>, %d: tensor<f32>):
    %n = "latch.accumulate"(%c, %w) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    "latch.yield"(%n, %d) : (tensor<8xf32>, tensor<f32>) -> ()
  }) {times = 3 : i64} : (tensor<8xf32>, tensor<f32>) -> (tensor<8xf32>, tensor<f32>)
  "latch.return"(%r#1, %r#0) : (tensor<f32>, tensor<8xf32>) -> ()
}) {sym_name = "loop_train"} : () -> ()

// -----

// A scan over 5 tokens: one carry (fast weights), two xs, two ys (one a scalar per step).
// CHECK-LABEL: sym_name = "scan_w"
// CHECK: %[[R:.+]]:3 = "latch.scan"(%[[W:.+]], %[[X:.+]], %[[T:.+]]) ({
// CHECK-NEXT: ^bb0(%[[C:.+]]: tensor<8xf32>, %[[XI:.+]]: tensor<8xf32>, %[[TI:.+]]: tensor<i64>):
// CHECK-NEXT: %[[N:.+]] = "latch.accumulate"(%[[C]], %[[XI]])
// CHECK-NEXT: %[[LR:.+]] = "latch.warmup_cosine"(%[[TI]])
// CHECK-NEXT: "latch.yield"(%[[N]], %[[N]], %[[LR]]) : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> ()
// CHECK-NEXT: }) {length = 5 : i64, num_carries = 1 : i64} : (tensor<8xf32>, tensor<5x8xf32>, tensor<5xi64>) -> (tensor<8xf32>, tensor<5x8xf32>, tensor<5xf32>)
// CHECK-NEXT: "latch.write"(%[[R]]#0) {state = @scan_w}
"latch.state"() {sym_name = "scan_w", type = tensor<8xf32>, kind = "param"} : () -> ()
"latch.update"() ({
^bb0(%x: tensor<5x8xf32>, %t: tensor<5xi64>, %loss: tensor<f32>):
  %w = "latch.read"() {state = @scan_w} : () -> tensor<8xf32>
  %r:3 = "latch.scan"(%w, %x, %t) ({
  ^bb0(%c: tensor<8xf32>, %xi: tensor<8xf32>, %ti: tensor<i64>):
    %n = "latch.accumulate"(%c, %xi) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %lr = "latch.warmup_cosine"(%ti) {peak = 1.0 : f64, warmup_steps = 0 : i64, total_steps = 5 : i64, final_ratio = 0.0 : f64} : (tensor<i64>) -> tensor<f32>
    "latch.yield"(%n, %n, %lr) : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> ()
  }) {num_carries = 1 : i64, length = 5 : i64} : (tensor<8xf32>, tensor<5x8xf32>, tensor<5xi64>) -> (tensor<8xf32>, tensor<5x8xf32>, tensor<5xf32>)
  "latch.write"(%r#0) {state = @scan_w} : (tensor<8xf32>) -> ()
  "latch.return"(%loss) : (tensor<f32>) -> ()
}) {sym_name = "scan_train"} : () -> ()

// -----

// A scan with no carries, and one with only carries (no xs, no ys).
// CHECK-LABEL: sym_name = "scan2_w"
// CHECK: "latch.scan"(%[[X:.+]]) ({
// CHECK-NEXT: ^bb0(%[[XI:.+]]: tensor<2xf32>):
// CHECK-NEXT: "latch.yield"(%[[XI]]) : (tensor<2xf32>) -> ()
// CHECK-NEXT: }) {length = 3 : i64, num_carries = 0 : i64} : (tensor<3x2xf32>) -> tensor<3x2xf32>
// CHECK: "latch.scan"(%[[L:.+]]) ({
// CHECK-NEXT: ^bb0(%[[C:.+]]: tensor<f32>):
// CHECK-NEXT: "latch.yield"(%[[C]]) : (tensor<f32>) -> ()
// CHECK-NEXT: }) {length = 7 : i64, num_carries = 1 : i64} : (tensor<f32>) -> tensor<f32>
"latch.state"() {sym_name = "scan2_w", type = tensor<8xf32>, kind = "param"} : () -> ()
"latch.update"() ({
^bb0(%x: tensor<3x2xf32>, %loss: tensor<f32>):
  %ys = "latch.scan"(%x) ({
  ^bb0(%xi: tensor<2xf32>):
    "latch.yield"(%xi) : (tensor<2xf32>) -> ()
  }) {num_carries = 0 : i64, length = 3 : i64} : (tensor<3x2xf32>) -> tensor<3x2xf32>
  %l = "latch.scan"(%loss) ({
  ^bb0(%c: tensor<f32>):
    "latch.yield"(%c) : (tensor<f32>) -> ()
  }) {num_carries = 1 : i64, length = 7 : i64} : (tensor<f32>) -> tensor<f32>
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "scan2_train"} : () -> ()
