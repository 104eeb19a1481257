// A whole training update as a Latch program, written by hand: least-squares regression
// y ≈ x·w, loss = mean((x·w − y)²), gradient 2/N · xᵀ(x·w − y), clipped to global norm 1,
// then an SGD-with-momentum step whose learning rate follows a warmup+cosine schedule.
// `make demo-ptx` compiles it through every stage to PTX:
//   latch-opt examples/mlir/sgd_update.mlir --pass-pipeline='builtin.module(latch-to-ptx)' --emit=ptx
#xw = affine_map<(n, o, k) -> (n, k)>
#wk = affine_map<(n, o, k) -> (k, o)>
#no = affine_map<(n, o, k) -> (n, o)>
#id2 = affine_map<(a, b) -> (a, b)>
#all = affine_map<(a, b) -> ()>
#tk = affine_map<(k, o, n) -> (n, k)>
#tr = affine_map<(k, o, n) -> (n, o)>
#to = affine_map<(k, o, n) -> (k, o)>
module {
  "latch.state"() {sym_name = "w", type = tensor<64x16xf32>, kind = "param"} : () -> ()
  "latch.state"() {sym_name = "step", type = tensor<i64>, kind = "counter"} : () -> ()
  "latch.state"() {sym_name = "w.momentum", type = tensor<64x16xf32>, kind = "moment"} : () -> ()
  "latch.update"() ({
  ^bb0(%x: tensor<256x64xf32>, %y: tensor<256x16xf32>):
    %w = "latch.read"() {state = @w} : () -> tensor<64x16xf32>
    %step = "latch.read"() {state = @step} : () -> tensor<i64>
    %buf = "latch.read"() {state = @"w.momentum"} : () -> tensor<64x16xf32>
    %zero = arith.constant 0.0 : f32
    %scale = arith.constant 0.0078125 : f32   // 2 / 256
    %inv = arith.constant 2.44140625e-04 : f32  // 1 / (256·16)
    // forward: r = x·w − y
    %e = tensor.empty() : tensor<256x16xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<256x16xf32>) -> tensor<256x16xf32>
    %xw = linalg.generic {indexing_maps = [#xw, #wk, #no], iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%x, %w : tensor<256x64xf32>, tensor<64x16xf32>) outs(%z : tensor<256x16xf32>) {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %p = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %p : f32
      linalg.yield %s : f32
    } -> tensor<256x16xf32>
    %r = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]}
        ins(%xw, %y : tensor<256x16xf32>, tensor<256x16xf32>) outs(%e : tensor<256x16xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.subf %a, %b : f32
      linalg.yield %d : f32
    } -> tensor<256x16xf32>
    // loss = mean(r²)
    %l0 = tensor.empty() : tensor<f32>
    %lz = linalg.fill ins(%zero : f32) outs(%l0 : tensor<f32>) -> tensor<f32>
    %sq = linalg.generic {indexing_maps = [#id2, #all], iterator_types = ["reduction", "reduction"]}
        ins(%r : tensor<256x16xf32>) outs(%lz : tensor<f32>) {
    ^bb0(%a: f32, %acc: f32):
      %p = arith.mulf %a, %a : f32
      %q = arith.mulf %p, %inv : f32
      %s = arith.addf %acc, %q : f32
      linalg.yield %s : f32
    } -> tensor<f32>
    // backward: g = 2/N · xᵀ r
    %ge = tensor.empty() : tensor<64x16xf32>
    %gz = linalg.fill ins(%zero : f32) outs(%ge : tensor<64x16xf32>) -> tensor<64x16xf32>
    %g = linalg.generic {indexing_maps = [#tk, #tr, #to], iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%x, %r : tensor<256x64xf32>, tensor<256x16xf32>) outs(%gz : tensor<64x16xf32>) {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %p = arith.mulf %a, %b : f32
      %q = arith.mulf %p, %scale : f32
      %s = arith.addf %acc, %q : f32
      linalg.yield %s : f32
    } -> tensor<64x16xf32>
    // the learning rule
    %gc, %norm = "latch.clip_global_norm"(%g) {max_norm = 1.0 : f64} : (tensor<64x16xf32>) -> (tensor<64x16xf32>, tensor<f32>)
    %lr = "latch.warmup_cosine"(%step) {peak = 0.05 : f64, warmup_steps = 10 : i64, total_steps = 200 : i64, final_ratio = 0.1 : f64} : (tensor<i64>) -> tensor<f32>
    %new:2 = "latch.sgd"(%w, %gc, %lr, %buf) {momentum = 0.9 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<64x16xf32>, tensor<64x16xf32>, tensor<f32>, tensor<64x16xf32>) -> (tensor<64x16xf32>, tensor<64x16xf32>)
    %one = arith.constant dense<1> : tensor<i64>
    %step1 = arith.addi %step, %one : tensor<i64>
    "latch.write"(%new#0) {state = @w} : (tensor<64x16xf32>) -> ()
    "latch.write"(%new#1) {state = @"w.momentum"} : (tensor<64x16xf32>) -> ()
    "latch.write"(%step1) {state = @step} : (tensor<i64>) -> ()
    "latch.return"(%sq) : (tensor<f32>) -> ()
  }) {sym_name = "update"} : () -> ()
}
