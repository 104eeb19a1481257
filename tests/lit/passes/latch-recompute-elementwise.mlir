// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-recompute-elementwise)' | FileCheck %s
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-recompute-elementwise, func.func(linalg-fuse-elementwise-ops), canonicalize, cse)' | FileCheck %s --check-prefix=FUSED
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-recompute-elementwise, func.func(linalg-fuse-elementwise-ops), latch-recompute-elementwise, func.func(linalg-fuse-elementwise-ops), canonicalize, cse)' | FileCheck %s --check-prefix=ROUNDS
// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-recompute-elementwise{aranges=false})' | FileCheck %s --check-prefix=BUFFERS
// An elementwise producer read by several generics, each reading every element once, is
// cloned for each further reader; fused, each reader computes it from the producer's input.
// A softmax-like chain: s = l - m, read by a row sum of exp(s) and by s * s.

// CHECK-LABEL: func.func @two_readers(
// CHECK-COUNT-2: arith.subf
// FUSED-LABEL: func.func @two_readers(
// FUSED: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%arg0, %arg1 :
// FUSED: arith.subf
// FUSED: math.exp
// FUSED: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 :
// FUSED: arith.subf
// FUSED: arith.mulf
// FUSED-NEXT: linalg.yield
// FUSED-NEXT: }
// FUSED-NEXT: return
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0, 0)>
#rowr = affine_map<(d0, d1) -> (d0)>
func.func @two_readers(%l: tensor<4x16xf32>, %m: tensor<4x1xf32>) -> (tensor<4x16xf32>, tensor<4xf32>) {
  %e = tensor.empty() : tensor<4x16xf32>
  %s = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%l, %m : tensor<4x16xf32>, tensor<4x1xf32>) outs(%e : tensor<4x16xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.subf %a, %b : f32
      linalg.yield %d : f32
  } -> tensor<4x16xf32>
  %z = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<4xf32>
  %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<4xf32>) -> tensor<4xf32>
  %sum = linalg.generic {indexing_maps = [#id, #rowr], iterator_types = ["parallel", "reduction"]}
      ins(%s : tensor<4x16xf32>) outs(%f1 : tensor<4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %x = math.exp %a : f32
      %y = arith.addf %x, %o : f32
      linalg.yield %y : f32
  } -> tensor<4xf32>
  %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<4x16xf32>) outs(%e : tensor<4x16xf32>) {
    ^bb0(%a: f32, %o: f32):
      %x = arith.mulf %a, %a : f32
      linalg.yield %x : f32
  } -> tensor<4x16xf32>
  return %g, %sum : tensor<4x16xf32>, tensor<4xf32>
}

// -----
// A product reads each element of its operands once per column of the other: the
// producer stays materialized (one generic computes it; the contraction reads it).
// CHECK-LABEL: func.func @contraction_reader(
// CHECK-COUNT-1: arith.subf
// CHECK-NOT: arith.subf
#a = affine_map<(i, j, k) -> (i, k)>
#b = affine_map<(i, j, k) -> (k, j)>
#c = affine_map<(i, j, k) -> (i, j)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @contraction_reader(%l: tensor<8x8xf32>, %w: tensor<8x8xf32>, %acc: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %e = tensor.empty() : tensor<8x8xf32>
  %s = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%l : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
    ^bb0(%a: f32, %o: f32):
      %d = arith.subf %a, %a : f32
      linalg.yield %d : f32
  } -> tensor<8x8xf32>
  %p = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%s, %w : tensor<8x8xf32>, tensor<8x8xf32>) outs(%acc : tensor<8x8xf32>) {
    ^bb0(%x: f32, %y: f32, %o: f32):
      %m = arith.mulf %x, %y : f32
      %r = arith.addf %o, %m : f32
      linalg.yield %r : f32
  } -> tensor<8x8xf32>
  %g = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
    ^bb0(%a: f32, %o: f32):
      %x = arith.mulf %a, %a : f32
      linalg.yield %x : f32
  } -> tensor<8x8xf32>
  return %p, %g : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----
// Except a plain widening of bf16 to f32 (attention="flash": q read by the scores' product
// and by the key gradient's): one copy per product, so each fuses into its product, which
// reads the bf16 values and widens them itself (a tensor-core kernel, half the bytes).
// CHECK-LABEL: func.func @widening_read_by_products(
// CHECK-COUNT-2: arith.extf
// CHECK-NOT: arith.extf
// FUSED-LABEL: func.func @widening_read_by_products(
// FUSED: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<8x8xbf16>, tensor<8x8xf32>)
// FUSED: arith.extf
// FUSED: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%arg1, %arg0 : tensor<8x8xf32>, tensor<8x8xbf16>)
// FUSED: arith.extf
#wa = affine_map<(i, j, k) -> (i, k)>
#wb = affine_map<(i, j, k) -> (k, j)>
#wc = affine_map<(i, j, k) -> (i, j)>
#wid = affine_map<(d0, d1) -> (d0, d1)>
func.func @widening_read_by_products(%q: tensor<8x8xbf16>, %w: tensor<8x8xf32>, %acc: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %e = tensor.empty() : tensor<8x8xf32>
  %qf = linalg.generic {indexing_maps = [#wid, #wid], iterator_types = ["parallel", "parallel"]}
      ins(%q : tensor<8x8xbf16>) outs(%e : tensor<8x8xf32>) {
    ^bb0(%a: bf16, %o: f32):
      %x = arith.extf %a : bf16 to f32
      linalg.yield %x : f32
  } -> tensor<8x8xf32>
  %s = linalg.generic {indexing_maps = [#wa, #wb, #wc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%qf, %w : tensor<8x8xf32>, tensor<8x8xf32>) outs(%acc : tensor<8x8xf32>) {
    ^bb0(%x: f32, %y: f32, %o: f32):
      %m = arith.mulf %x, %y : f32
      %r = arith.addf %o, %m : f32
      linalg.yield %r : f32
  } -> tensor<8x8xf32>
  %g = linalg.generic {indexing_maps = [#wa, #wb, #wc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%w, %qf : tensor<8x8xf32>, tensor<8x8xf32>) outs(%acc : tensor<8x8xf32>) {
    ^bb0(%x: f32, %y: f32, %o: f32):
      %m = arith.mulf %x, %y : f32
      %r = arith.addf %o, %m : f32
      linalg.yield %r : f32
  } -> tensor<8x8xf32>
  return %s, %g : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----
// A producer that reads two full-size tensors stays: each reader would read two tensors
// instead of one.
// CHECK-LABEL: func.func @two_large_inputs(
// CHECK-COUNT-1: arith.addf
// CHECK-NOT: arith.addf
#id3 = affine_map<(d0) -> (d0)>
func.func @two_large_inputs(%x: tensor<64xf32>, %y: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %e = tensor.empty() : tensor<64xf32>
  %s = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel"]}
      ins(%x, %y : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.addf %a, %b : f32
      linalg.yield %d : f32
  } -> tensor<64xf32>
  %g = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel"]}
      ins(%s : tensor<64xf32>) outs(%e : tensor<64xf32>) {
    ^bb0(%a: f32, %o: f32):
      %m = arith.mulf %a, %a : f32
      linalg.yield %m : f32
  } -> tensor<64xf32>
  %h = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel"]}
      ins(%s : tensor<64xf32>) outs(%e : tensor<64xf32>) {
    ^bb0(%a: f32, %o: f32):
      %m = arith.negf %a : f32
      linalg.yield %m : f32
  } -> tensor<64xf32>
  return %g, %h : tensor<64xf32>, tensor<64xf32>
}

// -----
// A tensor.extract of an elementwise result (a gather of a log-softmax) computes the
// producer's body on the extracted elements of its inputs.
// CHECK-LABEL: func.func @gather(
// CHECK: linalg.generic
// CHECK: %[[R:.*]] = linalg.index 0
// CHECK: %[[X:.*]] = tensor.extract %arg0[%[[R]], %{{.*}}] : tensor<4x16xf32>
// CHECK: %[[M:.*]] = tensor.extract %arg1[%[[R]], %{{.*}}] : tensor<4x1xf32>
// CHECK: %[[D:.*]] = arith.subf %[[X]], %[[M]]
// CHECK: linalg.yield %[[D]]
#gid = affine_map<(d0, d1) -> (d0, d1)>
#grow = affine_map<(d0, d1) -> (d0, 0)>
func.func @gather(%l: tensor<4x16xf32>, %m: tensor<4x1xf32>, %t: tensor<4xindex>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4x16xf32>
  %s = linalg.generic {indexing_maps = [#gid, #grow, #gid], iterator_types = ["parallel", "parallel"]}
      ins(%l, %m : tensor<4x16xf32>, tensor<4x1xf32>) outs(%e : tensor<4x16xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.subf %a, %b : f32
      linalg.yield %d : f32
  } -> tensor<4x16xf32>
  %e1 = tensor.empty() : tensor<4xf32>
  %picked = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%t : tensor<4xindex>) outs(%e1 : tensor<4xf32>) {
    ^bb0(%i: index, %o: f32):
      %r = linalg.index 0 : index
      %v = tensor.extract %s[%r, %i] : tensor<4x16xf32>
      linalg.yield %v : f32
  } -> tensor<4xf32>
  return %picked : tensor<4xf32>
}

// -----
// But a sum of two full-size tensors that is materialized anyway (a residual stream, also
// read by the next layer): the gather reads one element of it, not one of each term (the
// MoE's gather of its normalized input would recompute every earlier layer's output).
// CHECK-LABEL: func.func @gather_of_a_residual_sum(
// CHECK: %[[S:.*]] = linalg.generic
// CHECK: arith.addf
// CHECK: linalg.generic
// CHECK: %[[X:.*]] = tensor.extract %[[S]][
// CHECK-NOT: tensor.extract %arg0
// CHECK: linalg.yield %[[X]]
#rid = affine_map<(d0, d1) -> (d0, d1)>
func.func @gather_of_a_residual_sum(%x: tensor<4x16xf32>, %a: tensor<4x16xf32>, %t: tensor<4xindex>) -> (tensor<4xf32>, tensor<4x16xf32>) {
  %e = tensor.empty() : tensor<4x16xf32>
  %s = linalg.generic {indexing_maps = [#rid, #rid, #rid], iterator_types = ["parallel", "parallel"]}
      ins(%x, %a : tensor<4x16xf32>, tensor<4x16xf32>) outs(%e : tensor<4x16xf32>) {
    ^bb0(%p: f32, %q: f32, %o: f32):
      %d = arith.addf %p, %q : f32
      linalg.yield %d : f32
  } -> tensor<4x16xf32>
  %e1 = tensor.empty() : tensor<4xf32>
  %picked = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%t : tensor<4xindex>) outs(%e1 : tensor<4xf32>) {
    ^bb0(%i: index, %o: f32):
      %r = linalg.index 0 : index
      %v = tensor.extract %s[%r, %i] : tensor<4x16xf32>
      linalg.yield %v : f32
  } -> tensor<4xf32>
  return %picked, %s : tensor<4xf32>, tensor<4x16xf32>
}

// -----
// A gather of rows of a tensor placed in front of a zero row (the MoE's dispatch gradient:
// the experts' input gradients, a sum of the two products' roundings, then the dropped
// tokens' row): the extract of the insert_slice selects between the source, read at the
// clamped index, and the fill; the sum is computed on extracts of the two roundings, each
// written by its product (not inlined to extracts of the f32 products).
// CHECK-LABEL: func.func @gather_of_slots(
// CHECK: %[[R1:.*]] = linalg.generic {{.*}} ins(%[[P1:[0-9]+]] : tensor<2x4x8xf32>) outs
// CHECK: arith.truncf
// CHECK: %[[R2:.*]] = linalg.generic {{.*}} ins(%[[P2:[0-9]+]] : tensor<2x4x8xf32>) outs
// CHECK: arith.truncf
// CHECK-NOT: tensor.insert_slice
// CHECK: linalg.generic
// CHECK: ^bb0(%[[S:.*]]: index,
// CHECK: %[[C:.*]] = linalg.index 1
// CHECK: %[[IN:.*]] = arith.cmpi ult, %[[S]], %c8
// CHECK: %[[AT:.*]] = arith.select %[[IN]], %[[S]], %c0
// CHECK-NOT: arith.select %[[IN]], %[[C]]
// CHECK: tensor.extract %[[R1]][
// CHECK: tensor.extract %[[R2]][
// CHECK: %[[SUM:.*]] = arith.addf
// CHECK: %[[V:.*]] = arith.select %[[IN]], %[[SUM]], %cst
// CHECK: linalg.yield %[[V]]
// FUSED-LABEL: func.func @gather_of_slots(
// FUSED-NOT: tensor.insert_slice
// FUSED-NOT: tensor<9x8xf32>
#s3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @gather_of_slots(%a: tensor<2x4x16xbf16>, %w: tensor<16x8xbf16>, %b: tensor<2x4x16xbf16>,
                           %slot: tensor<6xindex>) -> tensor<6x8xf32> {
  %zero = arith.constant dense<0.0> : tensor<9x8xf32>
  %f0 = arith.constant 0.0 : f32
  %e32 = tensor.empty() : tensor<2x4x8xf32>
  %z = linalg.fill ins(%f0 : f32) outs(%e32 : tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %e16 = tensor.empty() : tensor<2x4x8xbf16>
  %p1 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d3, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%a, %w : tensor<2x4x16xbf16>, tensor<16x8xbf16>) outs(%z : tensor<2x4x8xf32>) {
    ^bb0(%x: bf16, %y: bf16, %o: f32):
      %xf = arith.extf %x : bf16 to f32
      %yf = arith.extf %y : bf16 to f32
      %m = arith.mulf %xf, %yf : f32
      %s = arith.addf %o, %m : f32
      linalg.yield %s : f32
  } -> tensor<2x4x8xf32>
  %p2 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d3, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%b, %w : tensor<2x4x16xbf16>, tensor<16x8xbf16>) outs(%z : tensor<2x4x8xf32>) {
    ^bb0(%x: bf16, %y: bf16, %o: f32):
      %xf = arith.extf %x : bf16 to f32
      %yf = arith.extf %y : bf16 to f32
      %m = arith.mulf %xf, %yf : f32
      %s = arith.addf %o, %m : f32
      linalg.yield %s : f32
  } -> tensor<2x4x8xf32>
  %r1 = linalg.generic {indexing_maps = [#s3, #s3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%p1 : tensor<2x4x8xf32>) outs(%e16 : tensor<2x4x8xbf16>) {
    ^bb0(%x: f32, %o: bf16):
      %t = arith.truncf %x : f32 to bf16
      linalg.yield %t : bf16
  } -> tensor<2x4x8xbf16>
  %r2 = linalg.generic {indexing_maps = [#s3, #s3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%p2 : tensor<2x4x8xf32>) outs(%e16 : tensor<2x4x8xbf16>) {
    ^bb0(%x: f32, %o: bf16):
      %t = arith.truncf %x : f32 to bf16
      linalg.yield %t : bf16
  } -> tensor<2x4x8xbf16>
  %sum = linalg.generic {indexing_maps = [#s3, #s3, #s3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%r1, %r2 : tensor<2x4x8xbf16>, tensor<2x4x8xbf16>) outs(%e32 : tensor<2x4x8xf32>) {
    ^bb0(%x: bf16, %y: bf16, %o: f32):
      %xf = arith.extf %x : bf16 to f32
      %yf = arith.extf %y : bf16 to f32
      %s = arith.addf %xf, %yf : f32
      linalg.yield %s : f32
  } -> tensor<2x4x8xf32>
  %flat = tensor.collapse_shape %sum [[0, 1], [2]] : tensor<2x4x8xf32> into tensor<8x8xf32>
  %placed = tensor.insert_slice %flat into %zero[0, 0] [8, 8] [1, 1] : tensor<8x8xf32> into tensor<9x8xf32>
  %e6 = tensor.empty() : tensor<6x8xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      ins(%slot : tensor<6xindex>) outs(%e6 : tensor<6x8xf32>) {
    ^bb0(%i: index, %o: f32):
      %c = linalg.index 1 : index
      %v = tensor.extract %placed[%i, %c] : tensor<9x8xf32>
      linalg.yield %v : f32
  } -> tensor<6x8xf32>
  return %g : tensor<6x8xf32>
}

// -----
// A reduction whose reduction loops all run once, into a zero-filled output (a one-hot
// scatter), becomes elementwise: the unit loop is dropped and the fill's value read
// instead of the output, so the fill goes and the one-hot fuses into its reader.
// CHECK-LABEL: func.func @one_hot(
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME: outs(%{{.*}} : tensor<4x16xf32>)
// CHECK: arith.addf %{{.*}}, %{{.*}} : f32
// CHECK-NEXT: linalg.yield
// FUSED-LABEL: func.func @one_hot(
// FUSED-NOT: dense<0.0
// FUSED: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%arg0, %arg1 :
// FUSED: arith.cmpi eq
// FUSED-NOT: linalg.generic
func.func @one_hot(%t: tensor<4x1x1xi64>, %iota: tensor<1x1x16xi64>) -> tensor<4xf32> {
  %z = arith.constant dense<0.0> : tensor<4x16xf32>
  %c = arith.constant -0.25 : f32
  %oh = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, 0)>, affine_map<(d0, d1, d2) -> (0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d2)>], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%t, %iota : tensor<4x1x1xi64>, tensor<1x1x16xi64>) outs(%z : tensor<4x16xf32>) {
    ^bb0(%a: i64, %b: i64, %o: f32):
      %eq = arith.cmpi eq, %a, %b : i64
      %f = arith.uitofp %eq : i1 to f32
      %m = arith.mulf %f, %c : f32
      %r = arith.addf %m, %o : f32
      linalg.yield %r : f32
  } -> tensor<4x16xf32>
  %e1 = tensor.empty() : tensor<4xf32>
  %z1 = arith.constant 0.0 : f32
  %f1 = linalg.fill ins(%z1 : f32) outs(%e1 : tensor<4xf32>) -> tensor<4xf32>
  %sum = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%oh : tensor<4x16xf32>) outs(%f1 : tensor<4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %y = arith.addf %a, %o : f32
      linalg.yield %y : f32
  } -> tensor<4xf32>
  return %sum : tensor<4xf32>
}

// -----
// A rounding to bf16 read twice stays one op: its readers read 2 bytes per element from
// its result, 4 from its input.
// CHECK-LABEL: func.func @rounding(
// FUSED-LABEL: func.func @rounding(
// CHECK-COUNT-1: arith.truncf
// CHECK-NOT: arith.truncf
#rid = affine_map<(d0) -> (d0)>
func.func @rounding(%x: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %e16 = tensor.empty() : tensor<64xbf16>
  %e = tensor.empty() : tensor<64xf32>
  %r = linalg.generic {indexing_maps = [#rid, #rid], iterator_types = ["parallel"]}
      ins(%x : tensor<64xf32>) outs(%e16 : tensor<64xbf16>) {
    ^bb0(%a: f32, %o: bf16):
      %t = arith.truncf %a : f32 to bf16
      linalg.yield %t : bf16
  } -> tensor<64xbf16>
  %g = linalg.generic {indexing_maps = [#rid, #rid], iterator_types = ["parallel"]}
      ins(%r : tensor<64xbf16>) outs(%e : tensor<64xf32>) {
    ^bb0(%a: bf16, %o: f32):
      %m = arith.extf %a : bf16 to f32
      linalg.yield %m : f32
  } -> tensor<64xf32>
  %h = linalg.generic {indexing_maps = [#rid, #rid], iterator_types = ["parallel"]}
      ins(%r : tensor<64xbf16>) outs(%e : tensor<64xf32>) {
    ^bb0(%a: bf16, %o: f32):
      %m = arith.extf %a : bf16 to f32
      %n = arith.negf %m : f32
      linalg.yield %n : f32
  } -> tensor<64xf32>
  return %g, %h : tensor<64xf32>, tensor<64xf32>
}

// -----
// An extract of a rounding reads the rounded tensor (materialized for its other reader),
// not the wider input: that input keeps one reader.
// CHECK-LABEL: func.func @gather_rounded(
// FUSED-LABEL: func.func @gather_rounded(
// CHECK: %[[R:.*]] = linalg.generic
// CHECK: arith.truncf
// CHECK: tensor.extract %[[R]]
// CHECK-NOT: tensor.extract %arg0
#gr = affine_map<(d0) -> (d0)>
func.func @gather_rounded(%x: tensor<64xf32>, %t: tensor<4xindex>) -> (tensor<64xf32>, tensor<4xf32>) {
  %e16 = tensor.empty() : tensor<64xbf16>
  %e = tensor.empty() : tensor<64xf32>
  %e4 = tensor.empty() : tensor<4xf32>
  %r = linalg.generic {indexing_maps = [#gr, #gr], iterator_types = ["parallel"]}
      ins(%x : tensor<64xf32>) outs(%e16 : tensor<64xbf16>) {
    ^bb0(%a: f32, %o: bf16):
      %v = arith.truncf %a : f32 to bf16
      linalg.yield %v : bf16
  } -> tensor<64xbf16>
  %g = linalg.generic {indexing_maps = [#gr, #gr], iterator_types = ["parallel"]}
      ins(%r : tensor<64xbf16>) outs(%e : tensor<64xf32>) {
    ^bb0(%a: bf16, %o: f32):
      %m = arith.extf %a : bf16 to f32
      linalg.yield %m : f32
  } -> tensor<64xf32>
  %p = linalg.generic {indexing_maps = [#gr, #gr], iterator_types = ["parallel"]}
      ins(%t : tensor<4xindex>) outs(%e4 : tensor<4xf32>) {
    ^bb0(%i: index, %o: f32):
      %v = tensor.extract %r[%i] : tensor<64xbf16>
      %w = arith.extf %v : bf16 to f32
      linalg.yield %w : f32
  } -> tensor<4xf32>
  return %g, %p : tensor<64xf32>, tensor<4xf32>
}

// -----
// And a plain transpose (a bmm's backward: h^T read by the gradients of w1 and w3): one
// copy per product, so each fuses into its product, which reads h through the transposed
// map (no [k, m] copy of h is written at all).
// CHECK-LABEL: func.func @transpose_read_by_products(
// CHECK-COUNT-2: iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<16x8xbf16>)
// FUSED: #[[HT:map[0-9]*]] = affine_map<(d0, d1, d2) -> (d2, d0)>
// FUSED-LABEL: func.func @transpose_read_by_products(
// FUSED-NOT: iterator_types = ["parallel", "parallel"]}
// FUSED-COUNT-2: linalg.generic {indexing_maps = [#[[HT]], {{.*}}], iterator_types = ["parallel", "parallel", "reduction"]} ins(%arg0, %arg
#ta = affine_map<(i, j, k) -> (i, k)>
#tb = affine_map<(i, j, k) -> (k, j)>
#tc = affine_map<(i, j, k) -> (i, j)>
#tin = affine_map<(d0, d1) -> (d1, d0)>
#tid = affine_map<(d0, d1) -> (d0, d1)>
func.func @transpose_read_by_products(%h: tensor<16x8xbf16>, %g1: tensor<16x4xbf16>, %g3: tensor<16x4xbf16>, %acc: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) {
  %e = tensor.empty() : tensor<8x16xbf16>
  %ht = linalg.generic {indexing_maps = [#tin, #tid], iterator_types = ["parallel", "parallel"]}
      ins(%h : tensor<16x8xbf16>) outs(%e : tensor<8x16xbf16>) {
    ^bb0(%a: bf16, %o: bf16):
      linalg.yield %a : bf16
  } -> tensor<8x16xbf16>
  %d1 = linalg.generic {indexing_maps = [#ta, #tb, #tc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%ht, %g1 : tensor<8x16xbf16>, tensor<16x4xbf16>) outs(%acc : tensor<8x4xf32>) {
    ^bb0(%x: bf16, %y: bf16, %o: f32):
      %xf = arith.extf %x : bf16 to f32
      %yf = arith.extf %y : bf16 to f32
      %m = arith.mulf %xf, %yf : f32
      %r = arith.addf %o, %m : f32
      linalg.yield %r : f32
  } -> tensor<8x4xf32>
  %d3 = linalg.generic {indexing_maps = [#ta, #tb, #tc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%ht, %g3 : tensor<8x16xbf16>, tensor<16x4xbf16>) outs(%acc : tensor<8x4xf32>) {
    ^bb0(%x: bf16, %y: bf16, %o: f32):
      %xf = arith.extf %x : bf16 to f32
      %yf = arith.extf %y : bf16 to f32
      %m = arith.mulf %xf, %yf : f32
      %r = arith.addf %o, %m : f32
      linalg.yield %r : f32
  } -> tensor<8x4xf32>
  return %d1, %d3 : tensor<8x4xf32>, tensor<8x4xf32>
}

// -----
// index_add into new_zeros decomposes to zeros + one_hot^T @ v: the sum of +0.0 and a
// product accumulated from a +0.0 fill is the product itself (exactly: such a sum is never
// -0.0), so that full pass goes.  Not for -0.0, nor for a product into another init.
// CHECK-LABEL: func.func @zeros_plus_product(
// CHECK: %[[P:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]
// CHECK-NOT: linalg.generic
// CHECK: return %[[P]]
// CHECK-LABEL: func.func @negative_zero_plus_product(
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]
// CHECK: arith.addf
// CHECK-LABEL: func.func @zeros_plus_accumulation(
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]
// CHECK: arith.addf
#za = affine_map<(i, j, k) -> (k, i)>
#zb = affine_map<(i, j, k) -> (k, j)>
#zc = affine_map<(i, j, k) -> (i, j)>
#zid = affine_map<(d0, d1) -> (d0, d1)>
func.func @zeros_plus_product(%h: tensor<16x8xf32>, %v: tensor<16x4xf32>) -> tensor<8x4xf32> {
  %zero = arith.constant 0.0 : f32
  %zeros = arith.constant dense<0.0> : tensor<8x4xf32>
  %e = tensor.empty() : tensor<8x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x4xf32>) -> tensor<8x4xf32>
  %p = linalg.generic {indexing_maps = [#za, #zb, #zc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%h, %v : tensor<16x8xf32>, tensor<16x4xf32>) outs(%f : tensor<8x4xf32>) {
    ^bb0(%x: f32, %y: f32, %o: f32):
      %m = arith.mulf %x, %y : f32
      %r = arith.addf %o, %m : f32
      linalg.yield %r : f32
  } -> tensor<8x4xf32>
  %s = linalg.generic {indexing_maps = [#zid, #zid, #zid], iterator_types = ["parallel", "parallel"]}
      ins(%zeros, %p : tensor<8x4xf32>, tensor<8x4xf32>) outs(%e : tensor<8x4xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %r = arith.addf %a, %b : f32
      linalg.yield %r : f32
  } -> tensor<8x4xf32>
  return %s : tensor<8x4xf32>
}
func.func @negative_zero_plus_product(%h: tensor<16x8xf32>, %v: tensor<16x4xf32>) -> tensor<8x4xf32> {
  %zero = arith.constant 0.0 : f32
  %nzeros = arith.constant dense<-0.0> : tensor<8x4xf32>
  %e = tensor.empty() : tensor<8x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x4xf32>) -> tensor<8x4xf32>
  %p = linalg.generic {indexing_maps = [#za, #zb, #zc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%h, %v : tensor<16x8xf32>, tensor<16x4xf32>) outs(%f : tensor<8x4xf32>) {
    ^bb0(%x: f32, %y: f32, %o: f32):
      %m = arith.mulf %x, %y : f32
      %r = arith.addf %o, %m : f32
      linalg.yield %r : f32
  } -> tensor<8x4xf32>
  %s = linalg.generic {indexing_maps = [#zid, #zid, #zid], iterator_types = ["parallel", "parallel"]}
      ins(%nzeros, %p : tensor<8x4xf32>, tensor<8x4xf32>) outs(%e : tensor<8x4xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %r = arith.addf %a, %b : f32
      linalg.yield %r : f32
  } -> tensor<8x4xf32>
  return %s : tensor<8x4xf32>
}
func.func @zeros_plus_accumulation(%h: tensor<16x8xf32>, %v: tensor<16x4xf32>, %init: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %zeros = arith.constant dense<0.0> : tensor<8x4xf32>
  %e = tensor.empty() : tensor<8x4xf32>
  %p = linalg.generic {indexing_maps = [#za, #zb, #zc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%h, %v : tensor<16x8xf32>, tensor<16x4xf32>) outs(%init : tensor<8x4xf32>) {
    ^bb0(%x: f32, %y: f32, %o: f32):
      %m = arith.mulf %x, %y : f32
      %r = arith.addf %o, %m : f32
      linalg.yield %r : f32
  } -> tensor<8x4xf32>
  %s = linalg.generic {indexing_maps = [#zid, #zid, #zid], iterator_types = ["parallel", "parallel"]}
      ins(%zeros, %p : tensor<8x4xf32>, tensor<8x4xf32>) outs(%e : tensor<8x4xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %r = arith.addf %a, %b : f32
      linalg.yield %r : f32
  } -> tensor<8x4xf32>
  return %s : tensor<8x4xf32>
}

// -----

// A gather o[slot[i], j] (bf16 rows of a padded [17, 64] buffer) read by two generics: the
// combine's product and the gates' gradient's row sum.  Each reader gets its own copy, so
// each gathers the rows itself; no [12, 64] copy is written for them.
// A gather of f32 rows into a bf16 result (wider than what it writes) stays materialized.
#row = affine_map<(i, j) -> (i)>
#id = affine_map<(i, j) -> (i, j)>
#red = affine_map<(i, j) -> (i)>
// CHECK-LABEL: func.func @gather_two_readers(
// CHECK-COUNT-2: tensor.extract %{{.*}} : tensor<17x64xbf16>
// FUSED-LABEL: func.func @gather_two_readers(
// FUSED: linalg.generic
// FUSED-SAME: ins(%{{.*}}, %{{.*}} : tensor<12xi64>, tensor<12x64xf32>)
// FUSED: tensor.extract %{{.*}} : tensor<17x64xbf16>
// FUSED: linalg.generic
// FUSED-SAME: ins(%{{.*}}, %{{.*}} : tensor<12xi64>, tensor<12x64xf32>)
// FUSED: tensor.extract %{{.*}} : tensor<17x64xbf16>
// FUSED-NOT: tensor<12x64xbf16>
func.func @gather_two_readers(%o: tensor<17x64xbf16>, %slot: tensor<12xi64>, %g: tensor<12x64xf32>, %acc: tensor<12xf32>) -> (tensor<12x64xf32>, tensor<12xf32>) {
  %e = tensor.empty() : tensor<12x64xbf16>
  %x = linalg.generic {indexing_maps = [#row, #id], iterator_types = ["parallel", "parallel"]} ins(%slot : tensor<12xi64>) outs(%e : tensor<12x64xbf16>) {
  ^bb0(%s: i64, %out: bf16):
    %r = arith.index_cast %s : i64 to index
    %c = linalg.index 1 : index
    %v = tensor.extract %o[%r, %c] : tensor<17x64xbf16>
    linalg.yield %v : bf16
  } -> tensor<12x64xbf16>
  %e2 = tensor.empty() : tensor<12x64xf32>
  %p = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %g : tensor<12x64xbf16>, tensor<12x64xf32>) outs(%e2 : tensor<12x64xf32>) {
  ^bb0(%a: bf16, %b: f32, %out: f32):
    %ae = arith.extf %a : bf16 to f32
    %m = arith.mulf %ae, %b : f32
    linalg.yield %m : f32
  } -> tensor<12x64xf32>
  %s = linalg.generic {indexing_maps = [#id, #id, #red], iterator_types = ["parallel", "reduction"]} ins(%x, %g : tensor<12x64xbf16>, tensor<12x64xf32>) outs(%acc : tensor<12xf32>) {
  ^bb0(%a: bf16, %b: f32, %out: f32):
    %ae = arith.extf %a : bf16 to f32
    %m = arith.mulf %ae, %b : f32
    %t = arith.addf %m, %out : f32
    linalg.yield %t : f32
  } -> tensor<12xf32>
  return %p, %s : tensor<12x64xf32>, tensor<12xf32>
}

// CHECK-LABEL: func.func @gather_narrowing(
// FUSED-LABEL: func.func @gather_narrowing(
// CHECK-COUNT-1: tensor.extract
// CHECK-NOT: tensor.extract
func.func @gather_narrowing(%o: tensor<17x64xf32>, %slot: tensor<12xi64>, %g: tensor<12x64xf32>) -> (tensor<12x64xf32>, tensor<12x64xf32>) {
  %e = tensor.empty() : tensor<12x64xbf16>
  %x = linalg.generic {indexing_maps = [#row, #id], iterator_types = ["parallel", "parallel"]} ins(%slot : tensor<12xi64>) outs(%e : tensor<12x64xbf16>) {
  ^bb0(%s: i64, %out: bf16):
    %r = arith.index_cast %s : i64 to index
    %c = linalg.index 1 : index
    %v = tensor.extract %o[%r, %c] : tensor<17x64xf32>
    %t = arith.truncf %v : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<12x64xbf16>
  %e2 = tensor.empty() : tensor<12x64xf32>
  %p = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %g : tensor<12x64xbf16>, tensor<12x64xf32>) outs(%e2 : tensor<12x64xf32>) {
  ^bb0(%a: bf16, %b: f32, %out: f32):
    %ae = arith.extf %a : bf16 to f32
    %m = arith.mulf %ae, %b : f32
    linalg.yield %m : f32
  } -> tensor<12x64xf32>
  %q = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %g : tensor<12x64xbf16>, tensor<12x64xf32>) outs(%e2 : tensor<12x64xf32>) {
  ^bb0(%a: bf16, %b: f32, %out: f32):
    %ae = arith.extf %a : bf16 to f32
    %m = arith.addf %ae, %b : f32
    linalg.yield %m : f32
  } -> tensor<12x64xf32>
  return %p, %q : tensor<12x64xf32>, tensor<12x64xf32>
}

// -----

// A SwiGLU gate: s = bf16(silu(bf16(p))) of an f32 product p that every reader takes
// rounded (latch-form-contraction-kernels will write p in bf16), read by the forward
// product s * u and the backward dy * s: s is recomputed in both (reading p counts as
// its bf16 bytes, no more than reading s).  A bare rounding of a product (r below, read
// by two generics) stays one op: copying it moves nothing.

// CHECK-LABEL: func.func @swiglu_gate(
// CHECK-COUNT-2: math.exp
// CHECK-NOT: math.exp
// CHECK: return
// CHECK-LABEL: func.func @bare_rounding(
// CHECK-COUNT-1: arith.truncf
// CHECK-NOT: arith.truncf
// CHECK: return
#mk = affine_map<(d0, d1, d2) -> (d0, d2)>
#kn = affine_map<(d0, d1, d2) -> (d2, d1)>
#mn = affine_map<(d0, d1, d2) -> (d0, d1)>
#e2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @swiglu_gate(%x: tensor<8x16xbf16>, %w: tensor<16x32xbf16>, %u: tensor<8x32xbf16>,
                       %dy: tensor<8x32xbf16>) -> (tensor<8x32xbf16>, tensor<8x32xbf16>) {
  %z = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<8x32xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %p = linalg.generic {indexing_maps = [#mk, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<8x16xbf16>, tensor<16x32xbf16>) outs(%f : tensor<8x32xf32>) {
    ^bb0(%a: bf16, %b: bf16, %o: f32):
      %a32 = arith.extf %a : bf16 to f32
      %b32 = arith.extf %b : bf16 to f32
      %m = arith.mulf %a32, %b32 : f32
      %s = arith.addf %o, %m : f32
      linalg.yield %s : f32
  } -> tensor<8x32xf32>
  %eb = tensor.empty() : tensor<8x32xbf16>
  %s = linalg.generic {indexing_maps = [#e2, #e2], iterator_types = ["parallel", "parallel"]}
      ins(%p : tensor<8x32xf32>) outs(%eb : tensor<8x32xbf16>) {
    ^bb0(%a: f32, %o: bf16):
      %r = arith.truncf %a : f32 to bf16
      %v = arith.extf %r : bf16 to f32
      %n = arith.negf %v : f32
      %x1 = math.exp %n : f32
      %d = arith.addf %x1, %one : f32
      %sg = arith.divf %one, %d : f32
      %sv = arith.mulf %v, %sg : f32
      %sb = arith.truncf %sv : f32 to bf16
      linalg.yield %sb : bf16
  } -> tensor<8x32xbf16>
  %g = linalg.generic {indexing_maps = [#e2, #e2, #e2], iterator_types = ["parallel", "parallel"]}
      ins(%s, %u : tensor<8x32xbf16>, tensor<8x32xbf16>) outs(%eb : tensor<8x32xbf16>) {
    ^bb0(%a: bf16, %b: bf16, %o: bf16):
      %m = arith.mulf %a, %b : bf16
      linalg.yield %m : bf16
  } -> tensor<8x32xbf16>
  %du = linalg.generic {indexing_maps = [#e2, #e2, #e2], iterator_types = ["parallel", "parallel"]}
      ins(%dy, %s : tensor<8x32xbf16>, tensor<8x32xbf16>) outs(%eb : tensor<8x32xbf16>) {
    ^bb0(%a: bf16, %b: bf16, %o: bf16):
      %m = arith.mulf %a, %b : bf16
      linalg.yield %m : bf16
  } -> tensor<8x32xbf16>
  return %g, %du : tensor<8x32xbf16>, tensor<8x32xbf16>
}

func.func @bare_rounding(%x: tensor<8x16xbf16>, %w: tensor<16x32xbf16>, %u: tensor<8x32xbf16>)
    -> (tensor<8x32xbf16>, tensor<8x32xbf16>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x32xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %p = linalg.generic {indexing_maps = [#mk, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<8x16xbf16>, tensor<16x32xbf16>) outs(%f : tensor<8x32xf32>) {
    ^bb0(%a: bf16, %b: bf16, %o: f32):
      %a32 = arith.extf %a : bf16 to f32
      %b32 = arith.extf %b : bf16 to f32
      %m = arith.mulf %a32, %b32 : f32
      %s = arith.addf %o, %m : f32
      linalg.yield %s : f32
  } -> tensor<8x32xf32>
  %eb = tensor.empty() : tensor<8x32xbf16>
  %r = linalg.generic {indexing_maps = [#e2, #e2], iterator_types = ["parallel", "parallel"]}
      ins(%p : tensor<8x32xf32>) outs(%eb : tensor<8x32xbf16>) {
    ^bb0(%a: f32, %o: bf16):
      %t = arith.truncf %a : f32 to bf16
      linalg.yield %t : bf16
  } -> tensor<8x32xbf16>
  %g = linalg.generic {indexing_maps = [#e2, #e2, #e2], iterator_types = ["parallel", "parallel"]}
      ins(%r, %u : tensor<8x32xbf16>, tensor<8x32xbf16>) outs(%eb : tensor<8x32xbf16>) {
    ^bb0(%a: bf16, %b: bf16, %o: bf16):
      %m = arith.mulf %a, %b : bf16
      linalg.yield %m : bf16
  } -> tensor<8x32xbf16>
  %h = linalg.generic {indexing_maps = [#e2, #e2, #e2], iterator_types = ["parallel", "parallel"]}
      ins(%r, %u : tensor<8x32xbf16>, tensor<8x32xbf16>) outs(%eb : tensor<8x32xbf16>) {
    ^bb0(%a: bf16, %b: bf16, %o: bf16):
      %m = arith.addf %a, %b : bf16
      linalg.yield %m : bf16
  } -> tensor<8x32xbf16>
  return %g, %h : tensor<8x32xbf16>, tensor<8x32xbf16>
}

// -----
// An arange (a generic reading nothing) read by a one-hot compare that broadcasts it and by
// a row reduction: each reader computes it from its own loop index (no [16] i64 tensor).
// CHECK-LABEL: func.func @iota_readers(
// CHECK-COUNT-2: linalg.index 0
// BUFFERS-LABEL: func.func @iota_readers(
// BUFFERS-COUNT-1: linalg.index 0
// BUFFERS-NOT: linalg.index
// BUFFERS: return
// FUSED-LABEL: func.func @iota_readers(
// FUSED-NOT: tensor<16xi64>
// FUSED: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : tensor<4x16xbf16>, tensor<4xi64>)
// FUSED: linalg.index 1
// FUSED: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%arg0, %arg1 : tensor<4x16xbf16>, tensor<4xi64>)
// FUSED: linalg.index 1
#v = affine_map<(t, v) -> (v)>
#t = affine_map<(t, v) -> (t)>
#id = affine_map<(t, v) -> (t, v)>
#i1 = affine_map<(v) -> (v)>
func.func @iota_readers(%x: tensor<4x16xbf16>, %label: tensor<4xi64>) -> (tensor<4x16xbf16>, tensor<4xf32>) {
  %e = tensor.empty() : tensor<16xi64>
  %iota = linalg.generic {indexing_maps = [#i1], iterator_types = ["parallel"]} outs(%e : tensor<16xi64>) {
    ^bb0(%o: i64):
      %i = linalg.index 0 : index
      %c = arith.index_cast %i : index to i64
      linalg.yield %c : i64
  } -> tensor<16xi64>
  %e2 = tensor.empty() : tensor<4x16xbf16>
  %g = linalg.generic {indexing_maps = [#id, #v, #t, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %iota, %label : tensor<4x16xbf16>, tensor<16xi64>, tensor<4xi64>) outs(%e2 : tensor<4x16xbf16>) {
    ^bb0(%a: bf16, %k: i64, %l: i64, %o: bf16):
      %hit = arith.cmpi eq, %k, %l : i64
      %one = arith.uitofp %hit : i1 to bf16
      %r = arith.subf %a, %one : bf16
      linalg.yield %r : bf16
  } -> tensor<4x16xbf16>
  %z = arith.constant 0.0 : f32
  %e3 = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e3 : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#id, #v, #t, #t], iterator_types = ["parallel", "reduction"]}
      ins(%x, %iota, %label : tensor<4x16xbf16>, tensor<16xi64>, tensor<4xi64>) outs(%f : tensor<4xf32>) {
    ^bb0(%a: bf16, %k: i64, %l: i64, %o: f32):
      %hit = arith.cmpi eq, %k, %l : i64
      %af = arith.extf %a : bf16 to f32
      %p = arith.select %hit, %af, %z : f32
      %r = arith.addf %o, %p : f32
      linalg.yield %r : f32
  } -> tensor<4xf32>
  return %g, %s : tensor<4x16xbf16>, tensor<4xf32>
}

// -----
// A one-hot [t == arange] read by an elementwise op and by a row sum: the one-hot (bounded in
// its vocabulary loop only by the arange) keeps the arange, so that it fuses into the row
// sum; once fused, the elementwise reader (bounded by x) computes the arange from its index.
// Nothing [4, 16] is materialized.
// CHECK-LABEL: func.func @one_hot_readers(
// CHECK-COUNT-1: linalg.index 0
// ROUNDS-LABEL: func.func @one_hot_readers(
// ROUNDS: linalg.generic {{.*}} outs(%{{.*}} : tensor<16xi64>)
// ROUNDS: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : tensor<4x16xf32>, tensor<4xi64>)
// ROUNDS: linalg.index 1
// ROUNDS: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%arg1, %{{.*}}, %arg2 : tensor<4xi64>, tensor<16xi64>, tensor<4xf32>)
// ROUNDS-NOT: tensor<4x16xf32>)
// ROUNDS: return
#v = affine_map<(t, v) -> (v)>
#t = affine_map<(t, v) -> (t)>
#id = affine_map<(t, v) -> (t, v)>
#i1 = affine_map<(v) -> (v)>
func.func @one_hot_readers(%x: tensor<4x16xf32>, %label: tensor<4xi64>, %g: tensor<4xf32>) -> (tensor<4x16xf32>, tensor<4xf32>) {
  %e = tensor.empty() : tensor<16xi64>
  %iota = linalg.generic {indexing_maps = [#i1], iterator_types = ["parallel"]} outs(%e : tensor<16xi64>) {
    ^bb0(%o: i64):
      %i = linalg.index 0 : index
      %c = arith.index_cast %i : index to i64
      linalg.yield %c : i64
  } -> tensor<16xi64>
  %e2 = tensor.empty() : tensor<4x16xf32>
  %oh = linalg.generic {indexing_maps = [#t, #v, #id], iterator_types = ["parallel", "parallel"]}
      ins(%label, %iota : tensor<4xi64>, tensor<16xi64>) outs(%e2 : tensor<4x16xf32>) {
    ^bb0(%l: i64, %k: i64, %o: f32):
      %hit = arith.cmpi eq, %l, %k : i64
      %one = arith.uitofp %hit : i1 to f32
      linalg.yield %one : f32
  } -> tensor<4x16xf32>
  %d = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %oh : tensor<4x16xf32>, tensor<4x16xf32>) outs(%e2 : tensor<4x16xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %r = arith.subf %a, %b : f32
      linalg.yield %r : f32
  } -> tensor<4x16xf32>
  %z = arith.constant 0.0 : f32
  %e3 = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e3 : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#id, #t, #t], iterator_types = ["parallel", "reduction"]}
      ins(%oh, %g : tensor<4x16xf32>, tensor<4xf32>) outs(%f : tensor<4xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %p = arith.mulf %a, %b : f32
      %r = arith.addf %o, %p : f32
      linalg.yield %r : f32
  } -> tensor<4xf32>
  return %d, %s : tensor<4x16xf32>, tensor<4xf32>
}
